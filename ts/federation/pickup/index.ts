/** The pickup client: a DID bound to a remote mediator over HTTP (batches) and WebSocket (live). */
export {
  type LiveOptions,
  type LiveSession,
  type PickedUp,
  PickupClient,
  type PickupClientOptions,
  type PickupStatus,
} from './client.js';
