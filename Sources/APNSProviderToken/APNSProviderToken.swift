/// APNSProviderToken: the HTTP/2 provider API's authentication tokens (JWT, ES256) and the renewal
/// policy that keeps one token per team key fresh. The one pure module that needs swift-crypto
/// for signing; `APNSTransport` uses it, the sync server's client never does.
public enum APNSProviderTokenModule {}
