//! Domains set at run time (`PUT /v1/config/domains/{domain}`): their
//! text, checked by the same code as the files with the same errors, and
//! what they add to the config in force (see
//! [`RateLimitConfig::with_runtime`]).

use super::error::ConfigError;
#[cfg(test)]
use super::runtime_domain::RuntimeDomain;
use super::set::{LoadOptions, RateLimitConfig};

/// What errors in a runtime domain's text are said to be in: its line
/// and column are the request body's.
pub const BODY_NAME: &str = "request body";

/// Why a domain's text is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainRefused {
    /// The text does not load, as a file would not: where and why, in
    /// the request body.
    Invalid(ConfigError),
    /// The text names another domain than the path.
    OtherDomain {
        /// The domain the text names.
        named: String,
    },
}

/// Checks `text` as the rules of `domain`, by the code that loads files.
pub fn check_domain(domain: &str, text: &str) -> Result<(), DomainRefused> {
    let config = RateLimitConfig::from_sources(
        &[(BODY_NAME.to_owned(), text.to_owned())],
        LoadOptions::default(),
    )
    .map_err(DomainRefused::Invalid)?;
    match config.domains().next() {
        Some(named) if named == domain => Ok(()),
        Some(named) => Err(DomainRefused::OtherDomain {
            named: named.to_owned(),
        }),
        None => Err(DomainRefused::Invalid(ConfigError {
            file: BODY_NAME.to_owned(),
            line: None,
            column: None,
            message: "no domain".into(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_load_alike_and_errors_point_into_the_body() {
        let yaml = "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n";
        let json = r#"{"domain": "api", "descriptors": [{"key": "k", "rate_limit": {"unit": "second", "requests_per_unit": 5}}]}"#;
        assert_eq!(check_domain("api", yaml), Ok(()));
        assert_eq!(check_domain("api", json), Ok(()));
        assert_eq!(
            check_domain("other", yaml),
            Err(DomainRefused::OtherDomain {
                named: "api".into()
            })
        );
        let bad = "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n";
        let Err(DomainRefused::Invalid(error)) = check_domain("api", bad) else {
            panic!("refused");
        };
        assert_eq!(error.file, BODY_NAME);
        assert_eq!(error.line, Some(3), "{error}");
    }

    #[test]
    fn runtime_domains_join_the_files_and_never_replace_one() {
        let file = (
            "f.yaml".to_owned(),
            "domain: files\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n".to_owned(),
        );
        let config = RateLimitConfig::from_sources(&[file], LoadOptions::default()).unwrap();
        let runtime = |domain: &str, limit: u64| RuntimeDomain {
            domain: domain.into(),
            text: format!(
                "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: {limit}}}\n"
            ),
            format: "yaml".into(),
            version: 3,
        };
        let merged = config.with_runtime(&[runtime("api", 7), runtime("files", 9)]);
        let limit = |d: &str| {
            merged
                .lookup(d, &[("k", "x")])
                .map(|m| m.limit.requests_per_unit)
        };
        assert_eq!(limit("api"), Some(7));
        assert_eq!(
            limit("files"),
            Some(1),
            "the file's domain stays the file's"
        );
        assert_eq!(merged.runtime_version("api"), Some(3));
        assert_eq!(merged.runtime_version("files"), None);
        assert!(merged.in_files("files") && !merged.in_files("api"));
        assert_eq!(merged.files(), vec!["f.yaml".to_owned()]);
        let json = merged.to_json();
        let origins: Vec<(&str, &str)> = json["domains"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["domain"].as_str().unwrap(), d["origin"].as_str().unwrap()))
            .collect();
        assert_eq!(origins, vec![("api", "runtime"), ("files", "file")]);
    }

    #[test]
    fn a_runtime_change_keeps_the_control_planes_domains_and_an_xds_update_keeps_the_runtime_ones()
    {
        let text = |domain: &str, limit: u64| {
            format!(
                "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: {limit}}}\n"
            )
        };
        let file = ("f.yaml".to_owned(), text("files", 1));
        let xds_spec = super::super::yaml::parse_file("xds:a", &text("plane", 4)).unwrap();
        let config = RateLimitConfig::with_xds(
            &[file],
            &[("xds:a".to_owned(), xds_spec)],
            LoadOptions::default(),
        )
        .unwrap();
        let runtime = RuntimeDomain {
            domain: "api".into(),
            text: text("api", 7),
            format: "yaml".into(),
            version: 1,
        };
        let merged = config.with_runtime(std::slice::from_ref(&runtime));
        let limit = |config: &RateLimitConfig, d: &str| {
            config
                .lookup(d, &[("k", "x")])
                .map(|m| m.limit.requests_per_unit)
        };
        assert_eq!(
            limit(&merged, "plane"),
            Some(4),
            "the control plane's domain survives a runtime change"
        );
        assert_eq!(limit(&merged, "api"), Some(7));
        assert_eq!(limit(&merged, "files"), Some(1));
        let again = merged.with_runtime(&[runtime]);
        assert_eq!(limit(&again, "plane"), Some(4), "and the next one");
    }
}
