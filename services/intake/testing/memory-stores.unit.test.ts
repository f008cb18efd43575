import { createMemoryConfigStore } from "../config-as-code/testing/memory-store.js";
import { createMemoryCustomSourceStore } from "../custom-sources/testing/memory-store.js";
import { createMemoryGroupingStore } from "../grouping/testing/memory-store.js";
import { createMemoryTables } from "./memory-tables.js";
import { describeStoreContract } from "./store-contract.js";

// The stores' contract against the memory stores the rooms' unit tests use (postgres-stores.test.ts runs it against Postgres).
describeStoreContract("memory", () => {
  const tables = createMemoryTables();
  return {
    customSources: createMemoryCustomSourceStore(tables),
    grouping: createMemoryGroupingStore(tables),
    config: createMemoryConfigStore(tables),
    audits: async (orgId) => tables.audits.filter((a) => a.orgId === orgId),
  };
});
