import type { ServiceImpl } from "@connectrpc/connect";
import type { CommsService } from "../../gen/warroom/comms/v1/comms_pb.js";

/** A group of CommsService handlers; routes.ts puts the groups together. */
export type Handlers<K extends keyof ServiceImpl<typeof CommsService>> = Pick<ServiceImpl<typeof CommsService>, K>;
