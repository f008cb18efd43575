/**
 * `npm run bench -- <name>`: runs the named benchmark (or all) and prints its figures.
 * Benchmarks compare against a floor measured in the same run where one applies, because
 * absolute numbers on a shared machine mean little.
 */
const benches: Record<string, () => Promise<void>> = {
  transport: async () => (await import("./transport.js")).benchTransport(),
  intake: async () => (await import("./intake.js")).benchIntake(),
  heartbeats: async () => (await import("./heartbeats.js")).benchHeartbeats(),
  subscriptions: async () => (await import("./subscriptions.js")).benchSubscriptions(),
  // Not part of the default run: a CPU profile and wait breakdown of the delivery path.
  profile: async () => (await import("./profile.js")).benchProfile(),
};

const wanted = process.argv.slice(2).filter((a) => !a.startsWith("-"));
const names = wanted.length ? wanted : Object.keys(benches).filter((name) => name !== "profile");
for (const name of names) {
  const bench = benches[name];
  if (!bench) {
    console.error(`unknown benchmark ${name}; known: ${Object.keys(benches).join(", ")}`);
    process.exit(2);
  }
  await bench();
}
process.exit(0);
