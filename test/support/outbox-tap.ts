import type postgres from "postgres";

/**
 * The relay deletes an outbox row once the bus has the event, so a test that checks what a
 * transaction wrote cannot read it back from the outbox. This keeps a copy of every row written to
 * a schema's outbox from now on, in `<schema>.outbox_tap`, whatever the transport and whenever the
 * relay runs. Test databases only.
 */
export async function tapOutbox(sql: postgres.Sql, schema: string): Promise<void> {
  await sql.unsafe(`
    create table if not exists ${schema}.outbox_tap (like ${schema}.outbox);
    create or replace function ${schema}.copy_to_outbox_tap() returns trigger language plpgsql as $$
      begin insert into ${schema}.outbox_tap select new.*; return null; end $$;
    create or replace trigger outbox_tap after insert on ${schema}.outbox for each row execute function ${schema}.copy_to_outbox_tap();
  `);
}
