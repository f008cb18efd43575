import { create, type DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, createRouterTransport, type ConnectRouter, type HandlerContext, type ServiceImpl, type Transport } from "@connectrpc/connect";
import { HeartbeatsService } from "../../gen/warroom/heartbeats/v1/heartbeats_pb.js";
import { IdentityService, PrincipalSchema, type Principal } from "../../gen/warroom/identity/v1/identity_pb.js";
import { IncidentsService } from "../../gen/warroom/incidents/v1/incidents_pb.js";
import { createClients, type Clients } from "../../services/runtime/transport/clients.js";
import { errorInterceptor } from "../../services/runtime/errors.js";
import { createLogger } from "../../services/runtime/observability/logger.js";

/**
 * Stand-ins for the identity service, the incident core and the heartbeats service, served through Connect's router
 * transport, for unit tests of one service's handlers: no database, no bus. A test sets what each
 * method answers, or makes it fail with a Connect code as a peer that is down, slow or missing
 * something would.
 */

export type IdentityImpl = Partial<ServiceImpl<typeof IdentityService>>;
export type IncidentsImpl = Partial<ServiceImpl<typeof IncidentsService>>;
export type HeartbeatsImpl = Partial<ServiceImpl<typeof HeartbeatsService>>;

export interface StubPeers {
  clients: Clients;
  /** The methods the stand-ins answer with; replace one to change what the next calls get. */
  identity: IdentityImpl;
  incidents: IncidentsImpl;
  heartbeats: HeartbeatsImpl;
}

/**
 * A transport to the handlers `routes` registers, with the error mapping a process applies
 * (domain errors become their Connect codes, anything else Internal): the service under test.
 */
export function serveUnderTest(routes: (router: ConnectRouter) => void): Transport {
  return createRouterTransport(routes, { router: { interceptors: [errorInterceptor(createLogger("silent", "unit-test"))] } });
}

/** The credential the stand-in identity service accepts for `principal`. */
export const STUB_TOKEN = "stub-session";

/** The member the stand-in identity service authenticates: an owner of "acme", unless `init` says otherwise. */
export function stubPrincipal(init: Partial<Principal> = {}): Principal {
  return create(PrincipalSchema, {
    orgId: "00000000-0000-4000-8000-000000000001",
    orgSlug: "acme",
    userId: "00000000-0000-4000-8000-000000000002",
    email: "owner@acme.example",
    role: "owner",
    credential: "session",
    ...init,
  });
}

/** A method that always fails with `code`, as a peer that is unavailable, too slow or lacks the thing would. */
export function failWith(code: Code, message = `stub peer answers ${Code[code]}`): () => never {
  return () => {
    throw new ConnectError(message, code);
  };
}

/**
 * Stub peers whose identity service authenticates `Bearer stub-session` as `principal` for its
 * organization and refuses anything else; every other method answers Unimplemented until a test
 * sets it.
 */
export function stubPeers(options: { principal?: Principal; identity?: IdentityImpl; incidents?: IncidentsImpl; heartbeats?: HeartbeatsImpl } = {}): StubPeers {
  const principal = options.principal ?? stubPrincipal();
  const identity: IdentityImpl = {
    authenticate(req, context) {
      if (context.requestHeader.get("authorization") !== `Bearer ${STUB_TOKEN}`) throw new ConnectError("invalid credential", Code.Unauthenticated);
      if (req.org !== principal.orgSlug) throw new ConnectError(`no organization "${req.org}"`, Code.NotFound);
      return principal;
    },
    ...options.identity,
  };
  const incidents: IncidentsImpl = { ...options.incidents };
  const heartbeats: HeartbeatsImpl = { ...options.heartbeats };
  const transport = createRouterTransport((router) => {
    router.service(IdentityService, dispatching(IdentityService, identity));
    router.service(IncidentsService, dispatching(IncidentsService, incidents));
    router.service(HeartbeatsService, dispatching(HeartbeatsService, heartbeats));
  });
  return { clients: createClients(transport), identity, incidents, heartbeats };
}

/** Every method of `service`, looking its handler up in `impl` at each call, so a test can swap one between calls. */
function dispatching<S extends DescService>(service: S, impl: Partial<ServiceImpl<S>>): Partial<ServiceImpl<S>> {
  const handlers: Record<string, unknown> = {};
  for (const method of service.methods) {
    handlers[method.localName] = (req: unknown, context: HandlerContext) => {
      const handler = (impl as Record<string, ((req: unknown, context: HandlerContext) => unknown) | undefined>)[method.localName];
      if (!handler) throw new ConnectError(`the stub peer does not answer ${method.name}`, Code.Unimplemented);
      return handler.call(impl, req, context);
    };
  }
  return handlers as Partial<ServiceImpl<S>>;
}

/** The Connect code a call failed with; throws when it succeeded. */
export async function codeOf(call: Promise<unknown>): Promise<Code> {
  try {
    await call;
  } catch (err) {
    return ConnectError.from(err).code;
  }
  throw new Error("the call succeeded");
}
