import { PageHeading } from "../ui";
import { ChatWebhook } from "./integrations/chat-webhook";
import { Credentials } from "./integrations/credentials";
import { EgressSwitch } from "./integrations/egress-switch";
import { RemoteSources } from "./integrations/remote-sources";
import { Subscriptions } from "./integrations/subscriptions";

/**
 * The integrations page: the organization's credentials, the chat webhook connection and each
 * source's set-up.
 */
export function IntegrationsPage(props: { org: string }) {
  return (
    <>
      <PageHeading title="Integrations">Integrations</PageHeading>
      <p class="muted">
        Any other tool: <a href="/custom-sources">custom sources</a>.
      </p>
      <Credentials org={props.org} />
      <ChatWebhook />
      <EgressSwitch />
      <RemoteSources />
      <Subscriptions />
    </>
  );
}
