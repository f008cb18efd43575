export {
  AddressPolicy,
  classifyAddress,
  createAddressPolicy,
  describeVerdict,
  isIpLiteral,
  parseCidrList,
  type AddressCategory,
  type AddressPolicyOptions,
  type AddressVerdict,
  type CheckedUrl,
  type VerdictReason,
} from "./address-policy.js";
export {
  createEgressClient,
  systemResolver,
  type EgressClient,
  type EgressClientOptions,
  type EgressRequest,
  type EgressResponse,
  type HostResolver,
  type VettedTarget,
} from "./egress-client.js";
export { EgressError, isEgressError, type EgressErrorReason } from "./egress-error.js";
