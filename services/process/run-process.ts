import type { Interceptor, Transport } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { buildRouteTable } from "../gateway/route-table.js";
import { createRestGateway } from "../gateway/rest-gateway.js";
import { type Broadcast, createInProcessBroadcast, createNatsBroadcast } from "../runtime/transport/broadcast.js";
import { createClients, internalServices, type Clients } from "../runtime/transport/clients.js";
import { ConfigError, loadConfig, type Config } from "../runtime/config/config.js";
import { openBackgroundPool, openDatabase, openPoolOn, type Database } from "../runtime/data/database.js";
import { DataDirLockedError } from "../runtime/data/data-dir-lock.js";
import { EmbeddedPostgresError } from "../runtime/data/embedded-postgres.js";
import { errorInterceptor } from "../runtime/errors.js";
import { validationInterceptor } from "../runtime/validation.js";
import { createInMemoryEventBus, createJetStreamEventBus, type EventBus } from "../runtime/transport/event-bus.js";
import { registerForwarding } from "../runtime/transport/forwarding.js";
import { registerGrpcHealth } from "../runtime/http/grpc-health.js";
import { registerGrpcReflection } from "../runtime/http/grpc-reflection.js";
import { BODY_LIMITS, deliveryMethodOfPath } from "../runtime/http/body-limits.js";
import { createBodyReads, createHeldBodies, sendRpcError } from "../runtime/http/body-reads.js";
import {
  natsConnectionOptions,
  natsServerVersionProblem,
  setInboxPrefix,
  setSubjectPrefix,
  unauthenticatedNatsProblem,
} from "../runtime/transport/nats-connection.js";
import { CLIENT_ADDRESS_HEADER, createClientAddress } from "../runtime/http/client-address.js";
import { deadlineInterceptor, publicMethodsOnlyInterceptor, publicOnly } from "../runtime/http/public-surface.js";
import { connectionDeadlines, listenHttp, peerAddress, sendJson, type HttpHandler, type HttpServer } from "../runtime/http/http-server.js";
import { createLogger, type Logger } from "../runtime/observability/logger.js";
import { unknownVariableWarnings } from "../runtime/config/config-warnings.js";
import {
  dbPoolConnections,
  dbPoolWaiting,
  deliveriesRefused,
  natsConnected,
  outboxLag,
  registry,
  rpcMetricsInterceptor,
} from "../runtime/observability/metrics.js";
import { migrate, MigrationsPendingError, pendingMigrations, type Migration } from "../runtime/data/migrations.js";
import { flushTracing, startTracing, tracingClientInterceptor, tracingEnabled, tracingServerInterceptor } from "../runtime/observability/tracing.js";
import { requestIdClientInterceptor, requestIdServerInterceptor, withCallerDeadline } from "../runtime/http/request-context.js";
import { createDirectTransport } from "../runtime/transport/direct-transport.js";
import { createMethodRegistry } from "../runtime/transport/unary-call.js";
import { connectionState, createNatsTransport, serveOverNats, type NatsRpcServer } from "../runtime/transport/nats-transport.js";
import { createProbes, type Probes } from "../runtime/http/probes.js";
import { createOutboxRelay, type Outbox, type OutboxRelay } from "../runtime/data/outbox.js";
import type { ServiceFactory, ServiceModule } from "../runtime/service-module.js";

/** Connections the metrics port holds at once: a scraper needs one or two. */
const METRICS_MAX_CONNECTIONS = 32;

export interface ProcessOptions {
  /** Names the process in logs and NATS. */
  name: string;
  services: ServiceFactory[];
  /** Serve the public REST routes (and forward Connect/gRPC for services not in this process). */
  gateway: boolean;
  env?: NodeJS.ProcessEnv;
  /** Extra HTTP handling before the REST routes (the web console). */
  extraHttp?: (config: Config, runtime: ExtraHttpRuntime) => ExtraHttp | undefined;
}

/** What the extra HTTP handling may use of the process. */
export interface ExtraHttpRuntime {
  events: EventBus;
  clients: Clients;
  logger: Logger;
}

export interface ExtraHttp {
  /** Answers the request and returns true, or returns false to leave it to the REST routes and Connect. */
  handle(req: Parameters<HttpHandler>[0], res: Parameters<HttpHandler>[1], url: URL): Promise<boolean>;
  /** Called first on stop: ends long-lived responses (live streams) so draining does not wait for them. */
  close?(): void;
}

export interface RunningProcess {
  config: Config;
  logger: Logger;
  url: string;
  port: number;
  /** GET /metrics on METRICS_PORT, when set. */
  metricsUrl?: string;
  database: Database;
  /** The background pool: outbox relays and sweeps. */
  background: { sql: Database["sql"]; close(): Promise<void> };
  nats?: NatsConnection;
  modules: ServiceModule[];
  transport: Transport;
  relays: OutboxRelay[];
  stop(): Promise<void>;
}

/** A transport whose target is fixed once the process's router is complete. */
function deferredTransport(): { transport: Transport; bind(target: Transport): void } {
  let target: Transport | undefined;
  const get = () => {
    if (!target) throw new Error("transport used before the process finished starting");
    return target;
  };
  return {
    transport: {
      unary: (...args) => get().unary(...args),
      stream: (...args) => get().stream(...args),
    },
    bind(t) {
      target = t;
    },
  };
}

/**
 * Starts one process: its configuration, database, migrations, services, transport (in-process or
 * NATS), servers and relays; resolves with what it runs and a `stop()` that ends it in order.
 */
export async function runProcess(options: ProcessOptions): Promise<RunningProcess> {
  // Variables the service does not read although named for it (typos): warned of at start, and
  // named in a refusal, which they may explain (DATABSE_URL).
  const unknownVariables = unknownVariableWarnings(options.env ?? process.env);
  let config: Config;
  try {
    // NATS_ALLOW_UNAUTHENTICATED is the environment's (a development or test machine's) unless the
    // given env says otherwise: a process composed with its own env inherits the machine's choice.
    config = loadConfig(
      options.env && options.env.NATS_ALLOW_UNAUTHENTICATED === undefined && process.env.NATS_ALLOW_UNAUTHENTICATED !== undefined
        ? { ...options.env, NATS_ALLOW_UNAUTHENTICATED: process.env.NATS_ALLOW_UNAUTHENTICATED }
        : options.env,
    );
  } catch (err) {
    if (err instanceof ConfigError && unknownVariables.length > 0) err.message += `\n  ${unknownVariables.join("\n  ")}`;
    throw err;
  }
  // Before anything that may be traced; a no-op unless OTEL_* asks for traces.
  await startTracing(options.name);
  const logger = createLogger(config.LOG_LEVEL, options.name);
  for (const warning of unknownVariables) logger.warn(warning);
  const database = await openDatabase({ url: config.DATABASE_URL, dataDir: config.DATA_DIR, poolSize: config.DATABASE_POOL_SIZE }, logger);
  const background = openBackgroundPool(database);
  try {
    return await startServices(options, config, logger, database, background);
  } catch (err) {
    // A start that fails half way releases the database (and with it the DATA_DIR lock).
    await background.close().catch(() => {});
    await database.close().catch(() => {});
    throw err;
  }
}

type BackgroundPool = ReturnType<typeof openBackgroundPool>;

async function startServices(options: ProcessOptions, config: Config, logger: Logger, database: Database, background: BackgroundPool): Promise<RunningProcess> {
  const nats = await connectNats(options.name, config, logger);
  const events: EventBus = nats ? await createJetStreamEventBus(nats, logger) : createInMemoryEventBus(logger);
  const broadcast = nats ? createNatsBroadcast(nats) : createInProcessBroadcast();
  const deferred = deferredTransport();
  // Calls made while serving a call get its remaining budget and end when it is given up.
  const clients = createClients(withCallerDeadline(deferred.transport));
  const { modules, relays } = await createModules(options.services, { config, logger, database, background, nats, events, broadcast, clients });

  const tracing = tracingEnabled();
  // The same on every surface (Connect, gRPC, NATS, in process): a request breaking its schema's
  // rules is refused before its handler runs.
  const interceptors = [requestIdServerInterceptor(), ...(tracing ? [tracingServerInterceptor()] : []), errorInterceptor(logger), validationInterceptor()];
  const { transport, natsServer } = await serveModules(nats, modules, logger, interceptors, tracing);
  deferred.bind(transport);

  const probes = createProbes({
    sql: database.sql,
    nats,
    extra: modules.flatMap((m) => (m.ready ? [{ name: m.name, ready: m.ready }] : [])),
  });
  // Requests other than the probes wait for start-up to finish (the bootstrap owner, consumers),
  // so a call sent as soon as the port answers never sees a half-started process.
  let markStarted!: () => void;
  const started = new Promise<void>((resolve) => (markStarted = resolve));
  const clientAddress = createClientAddress(config.TRUSTED_PROXY_CIDRS);
  const extra = options.extraHttp?.(config, { events, clients, logger });
  const handler = createPublicHandler({
    gateway: options.gateway,
    config,
    logger,
    modules,
    interceptors,
    transport,
    probes,
    clientAddress,
    started,
    extra,
  });
  const server: HttpServer = await listenHttp({
    host: config.HOST,
    port: config.PORT,
    handler,
    deadlines: connectionDeadlines(config),
    maxConnections: config.HTTP_MAX_CONNECTIONS,
    maxConnectionsPerAddress: config.HTTP_MAX_CONNECTIONS_PER_ADDRESS,
    isTrustedProxy: clientAddress.isTrustedProxy,
    maxBufferedResponseBytes: config.HTTP_MAX_BUFFERED_RESPONSE_BYTES,
  });
  // Metrics on a port of their own, never the public one: they describe traffic and load.
  const metricsServer =
    config.METRICS_PORT === undefined
      ? undefined
      : await listenMetrics(config, config.METRICS_PORT, { name: options.name, logger, database, nats, modules, relays });
  const metricsUrl = metricsServer ? `http://127.0.0.1:${metricsServer.port}/metrics` : undefined;
  const url = `http://127.0.0.1:${server.port}`;
  if (!config.PUBLIC_URL) config.publicUrl = `http://localhost:${server.port}`;

  // Consumers subscribe before any relay runs: in one process the bus hands an event only to the
  // subscribers it has, so events a crash left in an outbox, relayed first, would reach none.
  for (const module of modules) await module.start?.();
  for (const relay of relays) relay.start();
  probes.markStarted();
  markStarted();
  logger.info(
    {
      port: server.port,
      metricsPort: metricsServer?.port,
      services: modules.map((m) => m.name),
      transport: nats ? "nats" : "in-memory",
      database: database.embedded ? "embedded" : "server",
    },
    "serving",
  );

  const stop = shutdownSequence({ config, logger, probes, extra, server, metricsServer, natsServer, modules, relays, events, nats, background, database });
  return { config, logger, url, port: server.port, metricsUrl, database, background, nats, modules, transport, relays, stop };
}

/**
 * Connects to NATS when NATS_URL is set, and refuses a server the bus cannot trust: one that
 * accepts anyone (unless allowed for development) or of a version too old.
 */
async function connectNats(name: string, config: Config, logger: Logger): Promise<NatsConnection | undefined> {
  if (!config.NATS_URL) return undefined;
  const natsOptions = natsConnectionOptions(config, name);
  const nats = await connect(natsOptions);
  // The bus must fail safe: an open NATS is refused, unless allowed for development.
  const problem = unauthenticatedNatsProblem(nats.info, config.NATS_ALLOW_UNAUTHENTICATED);
  if (problem) {
    await nats.close().catch(() => {});
    throw new ConfigError(`refusing to start: ${problem}`);
  }
  const version = natsServerVersionProblem(nats.info?.version);
  if (version?.refuse) {
    await nats.close().catch(() => {});
    throw new ConfigError(`refusing to start: ${version.message}`);
  }
  if (version) logger.warn({ natsVersion: nats.info?.version }, version.message);
  if (config.NATS_ALLOW_UNAUTHENTICATED)
    logger.warn("NATS_ALLOW_UNAUTHENTICATED=true: a NATS server that accepts anyone is allowed; for development and tests only, never in production");
  setSubjectPrefix(nats, config.NATS_SUBJECT_PREFIX);
  setInboxPrefix(nats, natsOptions.inboxPrefix);
  return nats;
}

/** What every service module of the process is made with. */
interface ModuleRuntime {
  config: Config;
  logger: Logger;
  database: Database;
  background: BackgroundPool;
  nats: NatsConnection | undefined;
  events: EventBus;
  broadcast: Broadcast;
  clients: Clients;
}

/**
 * Makes each service module and its outbox relay, and migrates its schema (MIGRATE_ON_START) or
 * refuses to start while any schema is behind its migrations.
 */
async function createModules(factories: ServiceFactory[], runtime: ModuleRuntime): Promise<{ modules: ServiceModule[]; relays: OutboxRelay[] }> {
  const { config, logger, database, background, nats, events, broadcast, clients } = runtime;
  const modules: ServiceModule[] = [];
  const relays: OutboxRelay[] = [];
  const behind: { schema: string; migrations: Migration[] }[] = [];
  for (const factory of factories) {
    // The module's name is its schema; the relay is created once the name is known.
    let relay: OutboxRelay | undefined;
    const outbox: Outbox = {
      write: (...args) => relay!.write(...args),
      writeMany: (...args) => relay!.writeMany(...args),
      poke: () => relay?.poke(),
    };
    const module = factory({
      config,
      sql: database.sql,
      backgroundSql: background.sql,
      openPool: (applicationName, size, planning) => openPoolOn(database, size, applicationName, planning),
      logger: logger.child({ service: "pending" }),
      clients,
      transport: nats ? "nats" : "in-memory",
      outbox,
      events,
      broadcast,
    });
    relay = createOutboxRelay({ sql: background.sql, schema: module.name, bus: events, logger: logger.child({ service: module.name }) });
    if (config.MIGRATE_ON_START) await migrate(database.sql, module.name, module.migrations);
    else {
      const pending = await pendingMigrations(database.sql, module.name, module.migrations);
      if (pending.length > 0) behind.push({ schema: module.name, migrations: pending });
    }
    modules.push(module);
    relays.push(relay);
  }

  // Code on a schema without its migrations would answer wrongly (or fail at each call): the
  // process does not serve at all until the migration Job has run.
  if (behind.length > 0) {
    for (const module of modules) await module.stop?.().catch(() => {});
    await Promise.allSettled([events.close(), nats?.close()]);
    throw new MigrationsPendingError(behind);
  }
  return { modules, relays };
}

/**
 * Serves the modules' methods to the other processes over NATS, or in this process alone, and
 * answers the transport the process's clients call through.
 */
async function serveModules(
  nats: NatsConnection | undefined,
  modules: ServiceModule[],
  logger: Logger,
  interceptors: Interceptor[],
  tracing: boolean,
): Promise<{ transport: Transport; natsServer: NatsRpcServer | undefined }> {
  const clientInterceptors = (kind: "nats" | "in-memory") => [
    requestIdClientInterceptor(),
    rpcMetricsInterceptor(kind),
    ...(tracing ? [tracingClientInterceptor(kind)] : []),
  ];
  const registry = createMethodRegistry();
  for (const module of modules) module.register(registry.router);
  if (!nats) {
    return {
      transport: createDirectTransport(registry, { serverInterceptors: interceptors, clientInterceptors: clientInterceptors("in-memory") }),
      natsServer: undefined,
    };
  }
  const services = [...new Set(modules.flatMap((m) => m.services.map((s) => s.typeName)))];
  const natsServer = serveOverNats(nats, registry, { logger, interceptors, services });
  // The subscriptions are on the server before the process says it is ready: a call right after
  // start would otherwise find no responder.
  await nats.flush();
  return { transport: createNatsTransport(nats, { interceptors: clientInterceptors("nats") }), natsServer };
}

/** What the public port's handler answers with. */
interface PublicSurface {
  /** Serve the REST routes, and forward Connect/gRPC for the services not in this process. */
  gateway: boolean;
  config: Config;
  logger: Logger;
  modules: ServiceModule[];
  interceptors: Interceptor[];
  transport: Transport;
  probes: Probes;
  clientAddress: ReturnType<typeof createClientAddress>;
  /** Settled once start-up has finished. */
  started: Promise<void>;
  extra: ExtraHttp | undefined;
}

/**
 * The public port's handler: the probes at once; the rest once started, in turn the extra HTTP
 * handling, the REST routes and Connect/gRPC, every body read within one set of slots.
 */
function createPublicHandler(surface: PublicSurface): HttpHandler {
  const { config, logger, modules, interceptors, transport, probes, clientAddress, started, extra } = surface;
  const localServices = new Set(modules.flatMap((m) => m.services.map((s) => s.typeName)));
  const remoteServices: DescService[] = surface.gateway ? internalServices.filter((s) => !localServices.has(s.typeName)) : [];
  const connectHandler = connectNodeAdapter({
    // Internal methods are refused first: no validation runs for them on the public port.
    interceptors: [publicMethodsOnlyInterceptor(), deadlineInterceptor(), ...interceptors],
    // Anything not registered with its own limit (gRPC health) reads at most the default.
    readMaxBytes: BODY_LIMITS.default,
    routes: (r) => {
      const exposed = publicOnly(r);
      for (const module of modules) module.register(exposed);
      for (const service of remoteServices) registerForwarding(exposed, service, transport);
      registerGrpcHealth(r, probes);
      registerGrpcReflection(r, [...modules.flatMap((module) => module.services), ...remoteServices]);
    },
    fallback: (_req, res) => sendJson(res, 404, { error: "not found" }),
  });
  // One set of body-reading slots for every surface of the port: REST, Connect and gRPC.
  const bodyReads = createBodyReads({
    total: config.DELIVERY_BODY_READS,
    perAddress: config.DELIVERY_BODY_READS_PER_ADDRESS,
    perConnection: config.DELIVERY_BODY_READS_PER_CONNECTION,
    isTrustedProxy: clientAddress.isTrustedProxy,
  });
  const rest = surface.gateway
    ? createRestGateway({
        routes: buildRouteTable(internalServices),
        transport,
        logger,
        bodyReads,
        heldBodies: createHeldBodies({ bytes: config.GATEWAY_DELIVERY_BYTES }),
      })
    : undefined;

  return (req, res) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    // The caller's own forwarding header never reaches a service: it is replaced by the address
    // the request really came from (or the one a trusted proxy names).
    req.headers[CLIENT_ADDRESS_HEADER] = clientAddress.resolve(peerAddress(req), req.headers[CLIENT_ADDRESS_HEADER]);
    void (async () => {
      // Liveness is the process's own (it answers); readiness follows its dependencies.
      if (req.method === "GET" && url.pathname === "/healthz") return sendJson(res, 200, { status: "ok" });
      if (req.method === "GET" && url.pathname === "/readyz") {
        const ready = await probes.readiness();
        return sendJson(
          res,
          ready.ok ? 200 : 503,
          ready.ok ? { status: "ready", checks: ready.checks } : { status: "not ready", failing: ready.failing, checks: ready.checks },
        );
      }
      await started;
      if (extra && (await extra.handle(req, res, url))) return;
      if (rest && (await rest(req, res, url))) return;
      // A Connect or gRPC delivery's body is read within the same slots as a REST one's.
      const delivery = deliveryMethodOfPath(url.pathname);
      const unread = delivery ? bodyReads.admit(req, res) : undefined;
      if (unread) {
        deliveriesRefused.inc({ source: delivery!.slice(delivery!.lastIndexOf(".") + 1), reason: unread });
        return sendRpcError(req, res, bodyReads.error(unread));
      }
      connectHandler(req, res);
    })().catch((err) => {
      logger.error({ err }, "request failed");
      if (!res.headersSent) sendJson(res, 500, { error: "internal error" });
      else res.end();
    });
  };
}

/** GET /metrics on a port of its own, with the outbox lags, pool and NATS state read at each scrape. */
function listenMetrics(
  config: Config,
  port: number,
  measured: { name: string; logger: Logger; database: Database; nats: NatsConnection | undefined; modules: ServiceModule[]; relays: OutboxRelay[] },
): Promise<HttpServer> {
  const { name, logger, database, nats, modules, relays } = measured;
  return listenHttp({
    host: config.HOST,
    port,
    deadlines: connectionDeadlines(config),
    // Its own few slots, outside the public port's cap: a flood there cannot take the scrape's.
    maxConnections: METRICS_MAX_CONNECTIONS,
    handler: (req, res) => {
      void (async () => {
        if (req.method !== "GET" || new URL(req.url ?? "/", "http://localhost").pathname !== "/metrics") return sendJson(res, 404, { error: "not found" });
        await Promise.all([
          ...relays.map(async (relay, i) => outboxLag.set({ service: modules[i]!.name }, await relay.lagSeconds().catch(() => 0))),
          // A backlog that cannot be read (the database is down: readiness says so) keeps its last
          // value, and the scrape still answers.
          ...modules.map((module) =>
            module.measure?.().catch((err: unknown) => logger.debug({ err: String(err), service: module.name }, "could not read a backlog for /metrics")),
          ),
        ]);
        const pool = database.poolStats();
        for (const state of ["max", "busy", "idle", "connecting"] as const) dbPoolConnections.set({ state }, pool[state]);
        dbPoolWaiting.set(pool.waiting);
        if (nats) natsConnected.set({ connection: name }, connectionState(nats).connected() ? 1 : 0);
        const text = await registry.metrics();
        (res as import("node:http").ServerResponse).writeHead(200, { "content-type": registry.contentType });
        res.end(text);
      })().catch((err) => {
        logger.error({ err }, "metrics failed");
        if (!res.headersSent) sendJson(res, 500, { error: "internal error" });
      });
    },
  });
}

/** Each step of the shutdown is bounded: a hung dependency delays the exit, never blocks it. */
async function bounded(logger: Logger, what: string, ms: number, work: () => Promise<unknown>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), ms);
  });
  const result = await Promise.race([work().catch((err) => logger.warn({ err }, `${what} failed`)), timeout]);
  clearTimeout(timer);
  if (result === "timeout") logger.warn({ ms }, `${what} did not finish in time; going on`);
}

/** What a running process stops, in the order it stops them. */
interface StoppedParts {
  config: Config;
  logger: Logger;
  probes: Probes;
  extra: ExtraHttp | undefined;
  server: HttpServer;
  metricsServer: HttpServer | undefined;
  natsServer: NatsRpcServer | undefined;
  modules: ServiceModule[];
  relays: OutboxRelay[];
  events: EventBus;
  nats: NatsConnection | undefined;
  background: BackgroundPool;
  database: Database;
}

/** The process's `stop()`: one shutdown however often it is called, each step bounded. */
function shutdownSequence(parts: StoppedParts): () => Promise<void> {
  const { config, logger, probes, extra, server, metricsServer, natsServer, modules, relays, events, nats, background, database } = parts;
  const step = (what: string, ms: number, work: () => Promise<unknown>) => bounded(logger, what, ms, work);
  let stopped: Promise<void> | undefined;
  return () =>
    (stopped ??= (async () => {
      const graceMs = config.SHUTDOWN_GRACE_SECONDS * 1000;
      probes.markStopping();
      extra?.close?.();
      // First the public port: in-flight requests are answered (they may still call services of
      // this process over NATS), then the NATS side, then background work and the connections.
      // One grace for both: what the HTTP drain used, the NATS drain does not get again.
      const graceEnds = Date.now() + graceMs;
      await step("closing the HTTP server", graceMs + 500, () => server.close(graceMs));
      if (metricsServer) await step("closing the metrics port", 1000, () => metricsServer.close(0));
      const left = Math.max(500, graceEnds - Date.now());
      if (natsServer) await step("draining NATS calls", left + 500, () => natsServer.drain(left));
      for (const module of modules) await step(`stopping ${module.name}`, 1000, async () => module.stop?.());
      for (const relay of relays) await step("stopping an outbox relay", 1000, () => relay.stop());
      await step("closing the event bus", 1000, () => events.close());
      if (nats) await step("draining NATS", 1000, () => nats.drain());
      probes.close();
      await step("closing the background pool", 1500, () => background.close());
      // The embedded Postgres gets its own stop's bound (a fast shutdown, then SIGKILL): returning
      // earlier would leave DATA_DIR locked by a server this process still owns.
      await step("closing the database", database.embedded ? 21_000 : 6_000, () => database.close());
      await step("sending the last spans", 1000, () => flushTracing());
      logger.info("stopped");
    })());
}

/** Runs a process until SIGINT or SIGTERM, draining in-flight requests before exit. */
export async function main(options: ProcessOptions): Promise<void> {
  let running: RunningProcess;
  try {
    running = await runProcess(options);
  } catch (err) {
    // One JSON line, like every other: a refusal says what to change; anything else was not
    // expected, and its stack says where. LOG_LEVEL may be what was refused: fatal is always shown.
    const explained =
      err instanceof ConfigError || err instanceof DataDirLockedError || err instanceof EmbeddedPostgresError || err instanceof MigrationsPendingError;
    const logger = createLogger("fatal", options.name);
    if (explained) logger.fatal(err.message);
    else logger.fatal({ err }, "failed to start");
    process.exit(1);
  }
  let signalled = false;
  const onSignal = (signal: string) => {
    if (signalled) {
      running.logger.warn({ signal }, "second signal: exiting now");
      process.exit(1);
    }
    signalled = true;
    running.logger.info({ signal }, "draining");
    // Whatever hangs, the process ends within SHUTDOWN_GRACE_SECONDS + 5 s.
    setTimeout(
      () => {
        running.logger.error("shutdown did not finish in time: exiting");
        process.exit(1);
      },
      (running.config.SHUTDOWN_GRACE_SECONDS + 4.5) * 1000,
    ).unref();
    running.stop().then(
      () => process.exit(0),
      (err) => {
        running.logger.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
}
