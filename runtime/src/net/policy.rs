//! The node's outbound address policy, the SSRF guard. A tenant's operator chooses the URLs its
//! agents call (`base_url`, HTTP tools), so without a guard any tenant could make the node POST
//! to the node's own loopback services, the cloud metadata address (169.254.169.254) or the
//! private network around it. The policy is asked through [`super::AddressPolicy`] about each
//! *resolved* address, so a name cannot slip past by resolving to a forbidden address.
//!
//! Addresses that are not reachable on the public internet (loopback, link-local, private,
//! unspecified, multicast, documentation and other special ranges) are refused for every tenant
//! but [`UNRESTRICTED_TENANT`], the node owner's own, unless the node config allows them:
//!
//! ```toml
//! [outbound]
//! allow = ["127.0.0.1/32", "10.1.2.0/24", "::1/128"]
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;

use super::client::AddressPolicy;
use crate::engine::tenant::DEFAULT_TENANT;

/// The tenant the policy never restricts: the node owner's own (`default`).
pub const UNRESTRICTED_TENANT: &str = DEFAULT_TENANT;
/// Most entries of `[outbound] allow`.
pub const OUTBOUND_ALLOW_ENTRIES_MAX: usize = 256;

/// An address range: `10.0.0.0/8`, `::1/128`, or a bare address (the one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` lies in the range (IPv4 ranges never hold IPv6 addresses, and back).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(u32::from(net).into(), u32::from(ip).into(), self.prefix, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(u128::from(net), u128::from(ip), self.prefix, 128)
            }
            _ => false,
        }
    }
}

/// Whether the top `prefix` of `width` bits of `a` and `b` agree.
fn prefix_eq(a: u128, b: u128, prefix: u8, width: u32) -> bool {
    let drop = width - u32::from(prefix);
    drop >= 128 || (a >> drop) == (b >> drop)
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "{} is not an address range: {why} (expected e.g. \"127.0.0.1/32\" or \"fd00::/8\")",
                crate::engine::spec_error::echo(text)
            )
        };
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().map_err(|_| bad("not an IP address"))?;
        let width = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => width,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= width)
                .ok_or_else(|| bad(&format!("the prefix length must be 0 to {width}")))?,
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl<'de> serde::Deserialize<'de> for Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The ranges refused by default, each with what it is (for the refusal's message).
const SPECIAL_V4: &[(&str, &str)] = &[
    ("0.0.0.0/8", "unspecified (\"this network\")"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (where cloud metadata services answer)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignment"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved (and broadcast)"),
];
const SPECIAL_V6: &[(&str, &str)] = &[
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("100::/64", "discard-only"),
    ("2001:db8::/32", "documentation"),
    ("fc00::/7", "unique local (private)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
];

/// What kind of non-public address `ip` is, or `None` for a public one. IPv6 forms that carry
/// an IPv4 address (mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, compatible
/// `::a.b.c.d`) are judged by the IPv4 address they carry.
pub fn special_kind(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let table = if ip.is_ipv4() { SPECIAL_V4 } else { SPECIAL_V6 };
    table
        .iter()
        .find(|(range, _)| range.parse::<Cidr>().expect("built-in ranges parse").contains(ip))
        .map(|(_, kind)| *kind)
}

/// The IPv4 address an IPv6 address carries, if it is of a form that does.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let nat64: Cidr = "64:ff9b::/96".parse().expect("built-in range");
    let compatible: Cidr = "::/96".parse().expect("built-in range");
    let carries = nat64.contains(IpAddr::V6(ip))
        || (compatible.contains(IpAddr::V6(ip)) && u128::from(ip) > 1);
    carries.then(|| Ipv4Addr::from((u128::from(ip) & 0xffff_ffff) as u32))
}

/// The node's policy: the special ranges refused for restricted tenants, minus `allow`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundPolicy {
    /// Ranges every tenant may reach even though they are special (`[outbound] allow`).
    pub allow: Vec<Cidr>,
}

impl OutboundPolicy {
    /// Whether a run of `tenant` may connect to `addr`; the refusal says how to allow it.
    pub fn check(&self, tenant: &str, addr: SocketAddr) -> Result<(), String> {
        let ip = addr.ip();
        if tenant == UNRESTRICTED_TENANT || self.allow.iter().any(|range| range.contains(ip)) {
            return Ok(());
        }
        match special_kind(ip) {
            None => Ok(()),
            Some(kind) => Err(format!(
                "{ip} is a {kind} address, which agents of tenant {tenant:?} may not reach; \
                 to allow it, add \"{}\" to `allow` under [outbound] in the node config \
                 (vigil serve --config FILE) and restart the node",
                Cidr {
                    network: ip,
                    prefix: if ip.is_ipv4() { 32 } else { 128 },
                }
            )),
        }
    }

    /// This policy for the runs of `tenant`, as the outbound client's hook.
    pub fn for_tenant(self: &Arc<Self>, tenant: &str) -> AddressPolicy {
        let (policy, tenant) = (self.clone(), tenant.to_string());
        Arc::new(move |_host: &str, addr: SocketAddr| policy.check(&tenant, addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        SocketAddr::new(text.parse().unwrap(), 80)
    }

    #[test]
    fn ranges_parse_and_hold_their_edges() {
        let range: Cidr = "169.254.0.0/16".parse().unwrap();
        assert!(range.contains("169.254.0.0".parse().unwrap()));
        assert!(range.contains("169.254.255.255".parse().unwrap()));
        assert!(!range.contains("169.255.0.0".parse().unwrap()));
        assert!(!range.contains("169.253.255.255".parse().unwrap()));
        assert!(!range.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        let one: Cidr = "::1".parse().unwrap();
        assert_eq!(one.to_string(), "::1/128");
        assert!("10.0.0.0/33".parse::<Cidr>().unwrap_err().contains("0 to 32"));
        assert!("example.com/8".parse::<Cidr>().is_err());
    }

    #[test]
    fn special_addresses_are_named() {
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.255.255.255", "loopback"),
            ("169.254.169.254", "link-local (where cloud metadata services answer)"),
            ("0.0.0.0", "unspecified (\"this network\")"),
            ("10.1.2.3", "private"),
            ("192.168.1.1", "private"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local (where cloud metadata services answer)"),
            ("64:ff9b::a9fe:a9fe", "link-local (where cloud metadata services answer)"),
            ("fd00:ec2::254", "unique local (private)"),
        ] {
            assert_eq!(special_kind(ip.parse().unwrap()), Some(kind), "{ip}");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "128.0.0.1", "169.255.0.1"] {
            assert_eq!(special_kind(public.parse().unwrap()), None, "{public}");
        }
    }

    #[test]
    fn the_default_tenant_and_allowed_ranges_pass() {
        let policy = OutboundPolicy::default();
        assert!(policy.check(UNRESTRICTED_TENANT, addr("127.0.0.1")).is_ok());
        assert!(policy.check("acme", addr("8.8.8.8")).is_ok());
        let refusal = policy.check("acme", addr("169.254.169.254")).unwrap_err();
        assert!(refusal.contains("link-local") && refusal.contains("\"169.254.169.254/32\""), "{refusal}");
        assert!(refusal.contains("[outbound]"), "{refusal}");
        let allowing = OutboundPolicy {
            allow: vec!["127.0.0.1/32".parse().unwrap()],
        };
        assert!(allowing.check("acme", addr("127.0.0.1")).is_ok());
        assert!(allowing.check("acme", addr("127.0.0.2")).is_err());
        assert!(allowing.check("acme", addr("::1")).is_err());
        let hook = Arc::new(allowing).for_tenant("acme");
        assert!(hook("localhost", addr("127.0.0.1")).is_ok());
        assert!(hook("localhost", addr("::1")).is_err());
    }
}
