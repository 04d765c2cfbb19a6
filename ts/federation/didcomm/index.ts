/** DIDComm v2: message model, pack (plaintext, signed, anoncrypt, authcrypt, forward) and unpack. */

export { type CbcBackend, cbcBackend, nobleCbc, nodeCbc, useCbcBackend } from './cbc-backend.js';
export { CONTENT_ENCRYPTIONS, type ContentEncryption } from './content.js';
export { FORWARD_TYPE, forwardMessage, MAX_ROUTING_KEYS, parseForward, wrapInForward } from './forward.js';
export { type FromPrior, packFromPrior, verifyFromPrior } from './from-prior.js';
export { apvOf, encryptJwe, type Jwe, type KeyAgreementAlg, TYP_ENCRYPTED } from './jwe.js';
export { type Jws, signJws, TYP_SIGNED, verifyJws } from './jws.js';
export { DEFAULT_LIMITS, type DidCommLimits } from './limits.js';
export { type Attachment, type DidCommMessage, TYP_PLAIN, validateMessage } from './message.js';
export {
  type PackContext,
  type PackEncryptedOptions,
  type PackEncryptedResult,
  packEncrypted,
  packPlaintext,
  packSigned,
} from './pack.js';
export { UndecryptableLog, type UndecryptableRecord, type UndecryptableRecorder } from './undecryptable.js';
export { type UnpackContext, type Unpacked, type UnpackMetadata, unpack } from './unpack.js';
