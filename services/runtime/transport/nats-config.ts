import { parseArgs } from "node:util";
import { natsAuthorizationBlock } from "./nats-permissions.js";

// Prints the nats-server authorization block of the services' users, each password read by the
// server from its environment variable NATS_PASSWORD_<SERVICE>:
//   npm run nats-config [-- --prefix <NATS_SUBJECT_PREFIX>]
const { values } = parseArgs({ options: { prefix: { type: "string", default: "" } } });
process.stdout.write(
  `# The services' NATS users and what each may publish and subscribe to (npm run nats-config).\n` +
    natsAuthorizationBlock((user) => `$NATS_PASSWORD_${user.toUpperCase()}`, values.prefix),
);
