import { toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { EventBus } from "./event-bus.js";
import type { Logger } from "./logger.js";
import { outboxPublished } from "./metrics.js";
import type { Migration } from "./migrations.js";
import type { Sql, TransactionSql } from "./database.js";
import { contextFromTraceparent, currentTraceparent, detached, inSpan, recordSpan, SpanKind, tracingEnabled } from "./tracing.js";

/**
 * The transactional outbox: a domain event is written in the same transaction as the change it
 * describes, and a relay publishes it afterwards with the outbox id as its message id. Nothing is
 * lost while the bus is down (rows wait), and nothing is doubled when the relay publishes and
 * dies before marking the row (the stream drops a repeated message id).
 */

export function outboxMigration(schema: string, id: number): Migration {
  return {
    id,
    name: "outbox",
    sql: `
      create table ${schema}.outbox (
        id uuid primary key default gen_random_uuid(),
        subject text not null,
        payload bytea not null,
        created_at timestamptz not null default now(),
        published_at timestamptz
      );
      create index outbox_unpublished on ${schema}.outbox (created_at) where published_at is null;
    `,
  };
}

/**
 * The trace context of the work that wrote an event (a W3C traceparent, null when it was not
 * traced), so the publish and the consumers continue the same trace.
 */
export function outboxTraceContextMigration(schema: string, id: number): Migration {
  return {
    id,
    name: "outbox trace context",
    sql: `alter table ${schema}.outbox add column trace_context text`,
  };
}

export interface Outbox {
  /** Writes an event in the caller's transaction. */
  write<Desc extends DescMessage>(tx: TransactionSql, subject: string, schema: Desc, message: MessageShape<Desc>): Promise<void>;
  /** Writes many events of one subject in the caller's transaction, in one statement. */
  writeMany<Desc extends DescMessage>(tx: TransactionSql, subject: string, schema: Desc, messages: MessageShape<Desc>[]): Promise<void>;
  /** Asks the relay to run soon (after a commit). */
  poke(): void;
}

export interface OutboxRelay extends Outbox {
  start(): void;
  stop(): Promise<void>;
  /** Publishes what is pending now; returns how many were published. */
  drain(): Promise<number>;
  /** Age in seconds of the oldest event waiting to be published (0 when none waits). */
  lagSeconds(): Promise<number>;
}

export function createOutboxRelay(options: {
  sql: Sql;
  schema: string;
  bus: EventBus;
  logger: Logger;
  intervalMs?: number;
  batchSize?: number;
  /** Test seam: runs after publishing and before marking the rows published. */
  afterPublish?: (ids: string[]) => Promise<void>;
}): OutboxRelay {
  const { sql, schema, bus, logger } = options;
  const table = `${schema}.outbox`;
  const intervalMs = options.intervalMs ?? 250;
  const batchSize = options.batchSize ?? 200;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<number> | undefined;
  let stopped = true;
  let again = false;
  let lastCleanup = 0;

  async function publishBatch(): Promise<number> {
    return sql.begin(async (tx) => {
      const rows = await tx.unsafe<{ id: string; subject: string; payload: Buffer; trace_context: string | null; created_at: Date }[]>(
        `select id, subject, payload, trace_context, created_at from ${table} where published_at is null order by created_at limit $1 for update skip locked`,
        [batchSize],
      );
      if (rows.length === 0) return 0;
      for (const row of rows) {
        const event = { id: row.id, subject: row.subject, payload: new Uint8Array(row.payload), traceContext: row.trace_context };
        if (!tracingEnabled() || !row.trace_context) {
          await bus.publish(event);
          continue;
        }
        // The wait in the outbox and the publish are spans of the trace that wrote the row; the
        // event carries the publish span's context to its consumers.
        const parent = contextFromTraceparent(row.trace_context);
        const attributes = { "messaging.system": "nats", "messaging.destination.name": row.subject, "messaging.message.id": row.id, "warroom.outbox": schema };
        recordSpan(`outbox wait ${row.subject}`, { parent, startTime: row.created_at, attributes });
        await inSpan(`publish ${row.subject}`, { kind: SpanKind.PRODUCER, parent, attributes }, () => bus.publish({ ...event, traceContext: currentTraceparent() }));
      }
      const ids = rows.map((r) => r.id);
      await options.afterPublish?.(ids);
      await tx.unsafe(`update ${table} set published_at = now() where id = any($1::uuid[])`, [ids]);
      outboxPublished.inc({ service: schema }, rows.length);
      return rows.length;
    });
  }

  async function drain(): Promise<number> {
    let total = 0;
    for (;;) {
      const n = await publishBatch();
      total += n;
      if (n < batchSize) break;
    }
    if (Date.now() - lastCleanup > 3600_000) {
      lastCleanup = Date.now();
      await sql.unsafe(`delete from ${table} where published_at < now() - interval '1 day'`);
    }
    return total;
  }

  function run(): void {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = drain()
      .catch((err) => {
        logger.warn({ err: String(err), schema }, "outbox relay could not publish; will retry");
        return 0;
      })
      .finally(() => {
        running = undefined;
        if (again) {
          again = false;
          run();
        }
      });
  }

  const detachedRun = detached(run);

  return {
    async write(tx, subject, desc, message) {
      const traceContext = currentTraceparent();
      if (traceContext) {
        await tx.unsafe(`insert into ${table} (subject, payload, trace_context) values ($1, $2, $3)`, [subject, Buffer.from(toBinary(desc, message)), traceContext]);
        return;
      }
      await tx.unsafe(`insert into ${table} (subject, payload) values ($1, $2)`, [subject, Buffer.from(toBinary(desc, message))]);
    },
    async writeMany(tx, subject, desc, messages) {
      if (messages.length === 0) return;
      const payloads = messages.map((message) => Buffer.from(toBinary(desc, message)).toString("base64"));
      await tx.unsafe(`insert into ${table} (subject, payload, trace_context) select $1, decode(p, 'base64'), $3 from unnest($2::text[]) as p`, [
        subject,
        payloads,
        currentTraceparent(),
      ]);
    },
    poke() {
      // The relay's batch belongs to no one request's trace.
      if (!stopped) setImmediate(detachedRun);
    },
    start() {
      stopped = false;
      timer = setInterval(run, intervalMs);
      timer.unref();
      run();
    },
    async stop() {
      stopped = true;
      if (timer) clearInterval(timer);
      await running;
    },
    drain,
    async lagSeconds() {
      const [row] = await sql.unsafe<{ lag: number | null }[]>(
        `select extract(epoch from now() - min(created_at))::float8 as lag from ${table} where published_at is null`,
      );
      return row?.lag ?? 0;
    },
  };
}
