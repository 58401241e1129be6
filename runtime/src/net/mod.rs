//! The outbound transport: how the runtime reaches LLM providers and HTTP tools. A URL is parsed
//! into an `Endpoint` (`http://` or `https://`, a host name or IP literal, a port, a base path);
//! `OutboundClient::post_json` resolves the name with `tokio::net::lookup_host` (madsim's DNS
//! table under `--cfg madsim`), asks the address policy about each resolved address, connects
//! to the one it checked, wraps the stream in TLS (rustls on `ring`, Mozilla's roots plus an
//! optional extra CA file) for `https`, and reads the answer up to a byte cap, all under one
//! timeout. See docs/outbound.md.

mod client;
mod endpoint;
pub(crate) mod policy;
mod request;
mod tls;
mod written_flush;

pub use client::{
    allow_every_address, retry_after_ms, AddressPolicy, OutboundClient, CONNECT_ADDRESSES_MAX,
};
pub use endpoint::{
    Endpoint, EndpointError, Host, Scheme, HOST_LABEL_CHARS_MAX, HOST_NAME_CHARS_MAX,
    HTTPS_PORT_DEFAULT, HTTP_PORT_DEFAULT, URL_CHARS_MAX,
};
pub use policy::{special_kind, Cidr, OutboundPolicy, OUTBOUND_ALLOW_ENTRIES_MAX, UNRESTRICTED_TENANT};
pub use request::{
    JsonBody, OutboundAnswer, OutboundError, OutboundHeader, OutboundRequest, RESPONSE_BYTES_MAX_DEFAULT,
    TIMEOUT_MS_DEFAULT,
};
pub use written_flush::WrittenFlush;
pub use tls::{TlsOptions, TlsSetupError, CA_FILE_BYTES_MAX};
