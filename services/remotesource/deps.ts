import type { AddressPolicy } from "../runtime/egress/index.js";
import type { SecretBox } from "../runtime/credentials/secret-box.js";
import type { ServiceContext } from "../runtime/service-module.js";

/** What the remote-source handler groups share; service.ts builds it once. */
export interface RemoteSourceDeps extends Pick<ServiceContext, "sql" | "clients" | "outbox" | "logger" | "broadcast"> {
  /** Public addresses and REMOTE_SOURCE_ALLOW_CIDRS, less REMOTE_SOURCE_DENY_CIDRS; every call goes through it. */
  policy: AddressPolicy;
  /** REMOTE_SOURCE_HTTP_BEARER_HOSTS: hosts a bearer token may reach over plain http. */
  httpBearerHosts: readonly string[];
  /** EGRESS_CA_FILE: an extra trusted CA for every source. */
  ca?: Buffer;
  /** Credentials at rest, created on first use. */
  secretBox(): SecretBox;
}
