export {
  type MailboxMode,
  type MailboxStartOptions,
  type MailboxState,
  type MailboxStats,
  type PumpResult,
  RelayMailbox,
  type RelayMailboxOptions,
} from './mailbox.js';
export {
  DEFAULT_RETRY_POLICY,
  DIDCOMM_SEND_TYPE,
  DidCommOutbox,
  httpNetwork,
  MEDIA_TYPE_DIDCOMM_ENCRYPTED,
  type OutboxOptions,
  type RelayNetwork,
  type RetryPolicy,
  type SendingActor,
} from './outbox.js';
export { probeWebSocket, type WebSocketSupport } from './ws-probe.js';
