import type { ServiceImpl } from "@connectrpc/connect";
import type { IntakeService } from "../../gen/warroom/intake/v1/intake_pb.js";
import { createIngestTokenResolver } from "../runtime/credentials/ingest-token-cache.js";
import { deliveries } from "../runtime/observability/metrics.js";
import { annotate } from "../runtime/observability/tracing.js";
import { createAlertRouterHandlers } from "./alert-router-receiver.js";
import { createChatHandlers } from "./chat-receiver.js";
import { createConfigAsCodeHandlers } from "./config-as-code/config-as-code.js";
import { createCustomSourceHandlers } from "./custom-sources/custom-source-handlers.js";
import { createCorrelation, createCorrelationHandlers } from "./correlation/correlation.js";
import { createGrouping, createGroupingHandlers } from "./grouping/grouping.js";
import { createPostgresGroupingStore } from "./grouping/store.js";
import { createPostgresCustomSourceStore } from "./custom-sources/store.js";
import { createPostgresConfigStore } from "./config-as-code/store.js";
import { createDeliveryPath } from "./delivery.js";
import { createDropinHandlers } from "./dropin-receivers.js";
import { createReceiverSecrets } from "./receiver-secrets.js";
import { createRetryRecognition } from "./retry-recognition.js";
import type { IntakeDeps } from "./deps.js";
import { createTriggerEndpointHandlers } from "./trigger-endpoint.js";

type IntakeImpl = ServiceImpl<typeof IntakeService>;

/** Every handler group of IntakeService, with refusals counted per source. */
export function createIntakeRoutes(deps: IntakeDeps): IntakeImpl {
  const { clients, store, logger, broadcast } = deps;
  const ingestTokens = createIngestTokenResolver({ clients, broadcast });
  const tables = deps.customSources;
  const custom = tables && { ...tables, store: createPostgresCustomSourceStore(tables.sql, tables.outbox) };
  const groupingStore = tables && createPostgresGroupingStore(tables.sql, tables.outbox);
  const config = tables && { ...tables, store: createPostgresConfigStore(tables.sql, tables.outbox) };
  const grouping = groupingStore ? createGrouping({ store: groupingStore, clients, logger, broadcast, largeBodies: tables.largeBodies }) : undefined;
  const correlation = tables ? createCorrelation({ sql: tables.sql, logger, broadcast }) : undefined;
  const delivery = createDeliveryPath({
    clients,
    store,
    logger,
    retries: createRetryRecognition(store.retryKeys, logger),
    grouping,
    correlation,
    shares: deps.shares,
    recordCall: deps.recordCall,
    largeBodyBudget: deps.largeBodyBudget,
    largeBodies: custom?.largeBodies,
  });
  const receiverSecrets = createReceiverSecrets({ clients, store });
  return countRefusals({
    ...createTriggerEndpointHandlers({ clients, ingestTokens, delivery }),
    ...createAlertRouterHandlers({ receiverSecrets, delivery }),
    ...createChatHandlers({ store, receiverSecrets, delivery }),
    ...createDropinHandlers({ store, clients, ingestTokens, delivery }),
    ...createCustomSourceHandlers({ clients, delivery, customSources: custom, grouping, failures: store.receiverFailures }),
    ...createGroupingHandlers({ store: groupingStore, outbox: tables?.outbox, clients, broadcast }),
    ...createCorrelationHandlers({ sql: tables?.sql, outbox: tables?.outbox, clients, broadcast }),
    ...createConfigAsCodeHandlers({ clients, config }),
  });
}

/** The source a refused call is counted under; none for a read. */
const REFUSAL_SOURCE: Record<keyof IntakeImpl, string | undefined> = {
  deliver: "shared",
  deliverAlertRouter: "alert-router",
  deliverChat: "chat",
  enqueuePagerDutyEvent: "pagerduty-events",
  enqueuePagerDutyV1Event: "pagerduty-events",
  enqueuePagerDutyChange: "pagerduty-events",
  createOpsgenieAlert: "opsgenie",
  closeOpsgenieAlert: "opsgenie",
  acknowledgeOpsgenieAlert: "opsgenie",
  getOpsgenieRequestStatus: undefined,
  deliverCustomSource: "custom",
  deliverCustomSourceWithPathSecret: "custom",
  createCustomSource: undefined,
  listCustomSources: undefined,
  listCustomSourcePresets: undefined,
  getCustomSource: undefined,
  updateCustomSource: undefined,
  deleteCustomSource: undefined,
  rotateCustomSourceCredential: undefined,
  revokeCustomSourceCredential: undefined,
  listCustomSourceDeliveries: undefined,
  listCustomSourcePayloads: undefined,
  previewCustomSource: undefined,
  putGroupingOverride: undefined,
  listGroupingOverrides: undefined,
  deleteGroupingOverride: undefined,
  getCorrelation: undefined,
  putCorrelation: undefined,
  deleteCorrelation: undefined,
  exportConfig: undefined,
  applyConfig: undefined,
};

/** A delivery refused before it reached the incident core is counted as `refused`. */
function countRefusals<T extends Record<keyof IntakeImpl, (...args: never[]) => unknown>>(handlers: T): T {
  const counted: Record<string, unknown> = {};
  for (const [name, handler] of Object.entries(handlers)) {
    const source = REFUSAL_SOURCE[name as keyof IntakeImpl];
    counted[name] =
      source === undefined
        ? handler
        : async (...args: never[]) => {
            try {
              return await handler(...args);
            } catch (err) {
              deliveries.inc({ source, outcome: "refused" });
              annotate({ "warroom.outcome": "refused", "warroom.source": source });
              throw err;
            }
          };
  }
  return counted as T;
}
