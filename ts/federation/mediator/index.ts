/**
 * The DIDComm v2 mediator: Coordinate Mediation 2.0, Message Pickup 3.0 and Routing 2.0 forward,
 * served over HTTP and WebSocket, its queue on the log engine (docs/federation.md).
 */
export {
  AliasKeyManager,
  createPeerIdentity,
  type MediatorKeys,
  mediatorIdentity,
  mediatorKeys,
  type PeerIdentity,
  type PeerService,
} from './identity.js';
export {
  DEFAULT_MEDIATOR_LIMITS,
  type Link,
  Mediator,
  type MediatorAnswer,
  type MediatorLimits,
  type MediatorOptions,
} from './mediator.js';
export * as protocol from './protocol.js';
export { DEFAULT_QUEUE_LIMITS, MessageQueue, type QueuedMessage, type QueueLimits } from './queue.js';
export { DEFAULT_ROUTE_LIMITS, type RouteLimits, RouteTable } from './routes.js';
export { type MediatorServer, type MediatorServerOptions, startMediator } from './server.js';
