import type { ServiceImpl } from "@connectrpc/connect";
import type { SubscriptionsService } from "../../gen/warroom/subscriptions/v1/subscriptions_pb.js";
import { createDeliveryHandlers } from "./delivery-handlers.js";
import type { SubscriptionsDeps } from "./deps.js";
import { createSubscriptionHandlers } from "./subscription-handlers.js";

/** Every SubscriptionsService method, from its handler groups. */
export function createSubscriptionsRoutes(deps: SubscriptionsDeps): ServiceImpl<typeof SubscriptionsService> {
  return {
    ...createSubscriptionHandlers(deps),
    ...createDeliveryHandlers(deps),
  };
}
