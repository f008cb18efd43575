import type { DescService } from "@bufbuild/protobuf";
import type { ConnectRouter } from "@connectrpc/connect";
import type { Broadcast } from "./transport/broadcast.js";
import type { Clients } from "./transport/clients.js";
import type { Config } from "./config/config.js";
import type { Planning, Sql } from "./data/database.js";
import type { EventBus } from "./transport/event-bus.js";
import type { Logger } from "./observability/logger.js";
import type { Migration } from "./data/migrations.js";
import type { Outbox } from "./data/outbox.js";

/** What a service gets from the process that runs it. */
export interface ServiceContext {
  config: Config;
  sql: Sql;
  /**
   * A small pool of its own for background work that runs on a timer (sweeps): it can wait for a
   * connection, the requests on `sql` never wait for it. Not for event consumers: in one-process
   * mode they run within an outbox relay's publish, and work the relay waits for must not queue
   * behind the relay's own two connections.
   */
  backgroundSql: Sql;
  /**
   * Opens a pool of its own on the same server (the module ends it when it stops). Its statements
   * are planned on every call unless `planning` says otherwise (see database.ts).
   */
  openPool(applicationName: string, size: number, planning?: Planning): Sql;
  logger: Logger;
  /** Clients of every internal service, over this process's transport. */
  clients: Clients;
  /** What the clients' calls travel on: NATS (a message each way), or in memory in one process. */
  transport: "nats" | "in-memory";
  /** This service's outbox: write events in the transaction of the change. */
  outbox: Outbox;
  events: EventBus;
  /** Notices every process must see at once (a replaced credential). */
  broadcast: Broadcast;
}

/** One service: the tables it owns, the RPCs it serves and its background work. */
export interface ServiceModule {
  /** Also its Postgres schema and the name of its process. */
  name: string;
  migrations: Migration[];
  services: DescService[];
  register(router: ConnectRouter): void;
  /** Background work (sweeps, event consumers), started once the process serves. */
  start?(): Promise<void>;
  stop?(): Promise<void>;
  /** Extra readiness condition beyond database and NATS. */
  ready?(): Promise<boolean>;
  /** Sets the gauges read from the database (backlogs), at each scrape of /metrics. */
  measure?(): Promise<void>;
}

export type ServiceFactory = (context: ServiceContext) => ServiceModule;
