import { randomBytes } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../runtime/config/config.js";
import { createHashPool, DEFAULT_PARAMS, dummyHash, HashQueueFullError, hashPassword, needsRehash, setPasswordCost, verifyPassword } from "./passwords.js";

/** PASSWORD_SCRYPT_N: the cost of new hashes; hashes made with another cost still verify. */
describe("the password hash's cost", () => {
  afterEach(() => setPasswordCost(DEFAULT_PARAMS.N));

  it("makes new hashes with the configured cost, and still verifies and then remakes those of the default one", async () => {
    const before = await hashPassword("a password");
    expect(before).toMatch(/^scrypt\$131072\$8\$1\$/);
    setPasswordCost(16_384);
    expect(await verifyPassword("a password", before)).toBe(true);
    expect(await verifyPassword("another", before)).toBe(false);
    expect(needsRehash(before)).toBe(true);
    const after = await hashPassword("a password");
    expect(after).toMatch(/^scrypt\$16384\$8\$1\$/);
    expect(needsRehash(after)).toBe(false);
    expect(await verifyPassword("a password", after)).toBe(true);
    // The unknown email's hash is made with today's cost, so both answers take as long.
    expect(await dummyHash()).toMatch(/^scrypt\$16384\$/);
  });

  it("never verifies a stored hash asking for more work than today's cost and the default one", async () => {
    const made = await hashPassword("a password");
    const heavier = made.replace("scrypt$131072$", "scrypt$262144$");
    expect(await verifyPassword("a password", heavier)).toBe(false);
  });

  it("refuses at start a cost that is not a power of two from 16384 to 1048576, saying which", () => {
    for (const N of ["1024", "100000", "2097152", "abc"]) {
      expect(() => loadConfig({ PASSWORD_SCRYPT_N: N, DATABASE_URL: "", NATS_URL: "" })).toThrow(ConfigError);
      expect(() => loadConfig({ PASSWORD_SCRYPT_N: N, DATABASE_URL: "", NATS_URL: "" })).toThrow(/PASSWORD_SCRYPT_N/);
    }
    expect(loadConfig({ PASSWORD_SCRYPT_N: "65536", DATABASE_URL: "", NATS_URL: "" }).PASSWORD_SCRYPT_N).toBe(65_536);
  });
});

/** scrypt parameters that take half a second or more a hash: long enough to keep the threads busy. */
const HEAVY = { N: 65_536, r: 8, p: 4, maxmem: 2 * 128 * 65_536 * 8 };

/** The hashing queue's bound on a wait holds while every thread stays busy, not only when one frees. */
describe("the hashing queue", () => {
  it("refuses a hash that waited its bound unstarted before any running hash ends", async () => {
    // One thread a lane plus the first lane's extra one: two hashes run, the third waits.
    const pool = createHashPool(1, 100);
    // The estimate says a hash is quick, so the third is admitted; each takes half a second or more.
    pool.rescale(0.0001);
    const order: string[] = [];
    const hash = (who: string) => pool.derive({ account: who, address: who, known: true }, "a password", randomBytes(16), 64, HEAVY);
    const running = ["first", "second"].map((who) => hash(who).then(() => order.push(`${who} hashed`)));
    const waiting = await hash("third").then(
      () => "hashed",
      (err: unknown) => {
        order.push("third refused");
        return err;
      },
    );
    expect(waiting).toBeInstanceOf(HashQueueFullError);
    await Promise.all(running);
    expect(order[0]).toBe("third refused");
  });

  it("refuses a hash that could not end before its caller's deadline, before that deadline, however long the wait bound", async () => {
    const pool = createHashPool(1, 60_000);
    const hash = (who: string, deadlineAt?: number) =>
      pool.derive({ account: who, address: who, known: true, deadlineAt }, "a password", randomBytes(16), 64, HEAVY);
    // Two heavy hashes side by side: how long one takes on this machine (and the pool's estimate).
    const measuring = performance.now();
    await Promise.all([hash("first"), hash("second")]);
    const oneHashMs = performance.now() - measuring;
    const running = [hash("third"), hash("fourth")];
    // Started now it would end in time; queued behind two hashes that keep both threads busy, it
    // could not: refused at once, not after the caller has stopped listening.
    const deadlineAt = performance.now() + 1.5 * oneHashMs;
    const late = await hash("late", deadlineAt).then(
      () => "hashed",
      (err: unknown) => err,
    );
    expect(late).toBeInstanceOf(HashQueueFullError);
    expect(performance.now()).toBeLessThan(deadlineAt);
    await Promise.all(running);
    // With both threads free it is admitted and ends in time.
    expect(await hash("in time", performance.now() + 30_000)).toBeInstanceOf(Buffer);
  });
});
