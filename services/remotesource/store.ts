import type { SourceTransport } from "../remotesource-kit/client/source-client.js";

/** The remotesource schema's rows, as the handlers read them. */

/** A saved connection to a remote source; the credentials are sealed. */
export interface ConnectionRow {
  id: string;
  org_id: string;
  name: string;
  base_url: string;
  transport: SourceTransport;
  tenant_ref: string;
  key_id: string;
  credential_ciphertext: Buffer;
  status: "untested" | "connected" | "failed";
  last_error: string | null;
  last_tested_at: Date | null;
  revision: number;
}
