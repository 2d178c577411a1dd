//! The descriptors of a forwarded request: the client, the method, the
//! path, and the headers the domain maps.

use http::HeaderMap;

use super::client::ClientAddress;
use crate::limiter::check::{CheckRequest, DescriptorRequest};
use crate::rules::forward_auth::HeaderFeed;

/// The headers a forwarded request's path is read from, in order.
const PATH_HEADERS: [&str; 2] = ["x-forwarded-uri", "x-original-uri"];

/// A forwarded request whose path no header gives: without it the `path`
/// descriptor, and any limit on it, would silently not apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the forwarded request has no path: the proxy must send X-Forwarded-Uri or X-Original-URI")]
pub struct MissingPath;

/// The check of `domain` for a forwarded request: `[remote_address]`,
/// `[method]`, `[path]`, then one descriptor per mapped header the request
/// has (a header sent several times counts by its first value), one unit.
/// `call_method` is the method of the forward-auth call itself, used when
/// the proxy sends no `X-Forwarded-Method`.
pub fn forwarded_check(
    domain: &str,
    call_method: &str,
    headers: &HeaderMap,
    client: ClientAddress,
    feeds: &[HeaderFeed],
) -> Result<CheckRequest, MissingPath> {
    let path = PATH_HEADERS
        .iter()
        .find_map(|name| header_text(headers, name))
        .map(|uri| without_query(&uri).to_owned())
        .ok_or(MissingPath)?;
    let method = header_text(headers, "x-forwarded-method").unwrap_or_else(|| call_method.into());
    let mut descriptors = Vec::with_capacity(3 + feeds.len());
    descriptors.push(one_entry("remote_address", client.descriptor_value()));
    descriptors.push(one_entry("method", method));
    descriptors.push(one_entry("path", path));
    for feed in feeds {
        if let Some(value) = header_text(headers, &feed.header) {
            descriptors.push(one_entry(&feed.key, value));
        }
    }
    Ok(CheckRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 1,
    })
}

fn one_entry(key: &str, value: String) -> DescriptorRequest {
    DescriptorRequest {
        entries: vec![(key.to_owned(), value)],
        ..DescriptorRequest::default()
    }
}

/// The first value of a header, trimmed, when it is not empty; bytes that
/// are not UTF-8 replaced (a path may carry raw UTF-8 from NGINX's
/// `$request_uri`).
fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    let value = headers.get(name)?;
    let text = String::from_utf8_lossy(value.as_bytes());
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// The path of a request target: without its query and fragment, so that
/// `/login?x=1` and `/login?x=2` are one path to a limit.
fn without_query(uri: &str) -> &str {
    uri.split(['?', '#']).next().unwrap_or(uri)
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    fn request(
        pairs: &[(&'static str, &str)],
        feeds: &[HeaderFeed],
    ) -> Result<Vec<String>, MissingPath> {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        let client = ClientAddress("192.0.2.1".parse().unwrap());
        let check = forwarded_check("api", "GET", &headers, client, feeds)?;
        assert_eq!(check.domain, "api");
        assert_eq!(check.hits_addend, 1);
        Ok(check
            .descriptors
            .iter()
            .map(|d| {
                assert_eq!(d.entries.len(), 1);
                format!("{}={}", d.entries[0].0, d.entries[0].1)
            })
            .collect())
    }

    #[test]
    fn three_descriptors_from_the_forwarded_request() {
        let got = request(
            &[
                ("x-forwarded-method", "POST"),
                ("x-forwarded-uri", "/login?user=a#top"),
                ("x-original-uri", "/other"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(
            got,
            ["remote_address=192.0.2.1", "method=POST", "path=/login"]
        );
        let nginx = request(&[("x-original-uri", "/a/b?c")], &[]).unwrap();
        assert_eq!(
            nginx,
            ["remote_address=192.0.2.1", "method=GET", "path=/a/b"]
        );
    }

    #[test]
    fn mapped_headers_add_a_descriptor_each_when_present() {
        let feeds = [
            HeaderFeed {
                key: "api_key".into(),
                header: "x-api-key".into(),
            },
            HeaderFeed {
                key: "tenant".into(),
                header: "x-tenant".into(),
            },
        ];
        let got = request(
            &[
                ("x-forwarded-uri", "/"),
                ("x-tenant", " acme "),
                ("x-api-key", ""),
            ],
            &feeds,
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "remote_address=192.0.2.1",
                "method=GET",
                "path=/",
                "tenant=acme"
            ]
        );
    }

    #[test]
    fn no_path_is_an_error_not_a_limit_that_never_applies() {
        assert_eq!(
            request(&[("x-forwarded-method", "GET")], &[]),
            Err(MissingPath)
        );
        assert_eq!(request(&[("x-forwarded-uri", " ")], &[]), Err(MissingPath));
    }
}
