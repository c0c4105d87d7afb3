// The TCP rendezvous store: one server per job (the launcher's, on node rank 0) and one client per
// rank process. Split into server, client and wire-format files to keep each small; import from here.
export { TcpStoreServer, type TcpStoreServerOptions } from './tcp-store-server.js';
export { storeAddress, TcpStoreClient, type TcpStoreClientOptions } from './tcp-store-client.js';
export { storeBarrier, type StoreBarrierOptions } from './barrier.js';
export { MAX_KEY_BYTES, MAX_VALUE_BYTES } from './tcp-protocol.js';
