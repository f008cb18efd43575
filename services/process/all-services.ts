import { createCommsService } from "../comms/service.js";
import { createHeartbeatsService } from "../heartbeats/service.js";
import { createIdentityService } from "../identity/service.js";
import { createIncidentsService } from "../incidents/service.js";
import { createRemoteSourceService } from "../remotesource/service.js";
import { createIntakeService } from "../intake/service.js";
import { createSubscriptionsService } from "../subscriptions/service.js";
import type { ServiceFactory } from "../runtime/service-module.js";

/** Every service, in start-up order: what `npm start` runs in one process. */
export const allServices: ServiceFactory[] = [
  createIdentityService,
  createIncidentsService,
  createIntakeService,
  createHeartbeatsService,
  createCommsService,
  createRemoteSourceService,
  createSubscriptionsService,
];
