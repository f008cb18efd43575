import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { CommsService } from "../../../gen/warroom/comms/v1/comms_pb.js";
import { HeartbeatsService } from "../../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { IdentityService } from "../../../gen/warroom/identity/v1/identity_pb.js";
import { IncidentsService } from "../../../gen/warroom/incidents/v1/incidents_pb.js";
import { IntakeService } from "../../../gen/warroom/intake/v1/intake_pb.js";
import { RemoteSourcesService } from "../../../gen/warroom/remotesource/v1/remotesource_pb.js";
import { SubscriptionsService } from "../../../gen/warroom/subscriptions/v1/subscriptions_pb.js";

/** Every internal service, in the order a one-process start registers them. */
export const internalServices = [
  IdentityService,
  IncidentsService,
  IntakeService,
  HeartbeatsService,
  CommsService,
  RemoteSourcesService,
  SubscriptionsService,
] as const;

export interface Clients {
  identity: Client<typeof IdentityService>;
  incidents: Client<typeof IncidentsService>;
  intake: Client<typeof IntakeService>;
  heartbeats: Client<typeof HeartbeatsService>;
  comms: Client<typeof CommsService>;
  remoteSources: Client<typeof RemoteSourcesService>;
  subscriptions: Client<typeof SubscriptionsService>;
}

/** A Connect client of each service, all calling through `transport` (in-process or NATS). */
export function createClients(transport: Transport): Clients {
  return {
    identity: createClient(IdentityService, transport),
    incidents: createClient(IncidentsService, transport),
    intake: createClient(IntakeService, transport),
    heartbeats: createClient(HeartbeatsService, transport),
    comms: createClient(CommsService, transport),
    remoteSources: createClient(RemoteSourcesService, transport),
    subscriptions: createClient(SubscriptionsService, transport),
  };
}
