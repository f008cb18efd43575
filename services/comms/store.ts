/** The comms schema's rows, as the handlers read them. */

/** The columns of a message row the timeline needs. */
export interface SentMessageRow {
  id: string;
  org_id: string;
  incident_id: string;
  channel: string;
  label: string | null;
  body: string;
  state: string;
  error: string | null;
  approved_by: string | null;
  sent_by: string | null;
}

/** A message row as the handlers read it. */
export interface MessageRow extends SentMessageRow {
  version: number;
}

/** What a draft or approval returns: the message and its version, for optimistic updates. */
export interface MessageVersionRow {
  id: string;
  version: number;
}

/** The organization's chat connection: the webhook URL, sealed. */
export interface ChatConnectionRow {
  key_id: string;
  url_ciphertext: Buffer;
}

export interface EgressSettingRow {
  enabled: boolean;
}
