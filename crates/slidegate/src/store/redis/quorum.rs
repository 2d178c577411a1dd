//! What the sentinels said, and the master a majority of them names.
//!
//! A node is followed only when a majority of the sentinels of the URL
//! (those that did not answer count as not naming it) name it: one
//! sentinel that names another node, by mistake or on purpose, is outvoted
//! and never learns the master's password, because no connection is opened
//! to a node that only a minority names.

use std::fmt;
use std::sync::Arc;

/// Longest host name a sentinel may name (DNS allows 253 characters).
const MAX_HOST: usize = 255;

/// What one sentinel answered to `SENTINEL get-master-addr-by-name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Said {
    /// It names this node (`host:port`).
    Names(String),
    /// It knows no master of that name.
    KnowsNone,
    /// It did not answer, or answered something else.
    Failed(String),
}

/// The answers of one round of questions.
#[derive(Debug)]
pub(crate) struct Votes {
    /// Each sentinel that answered (or failed to), what it said, and its
    /// index in the URL, in the URL's order (logs read the same each time).
    said: Vec<(Arc<str>, Said, usize)>,
    /// How many sentinels the URL names.
    of: usize,
}

impl Votes {
    /// No answer yet from any of the `of` sentinels of the URL.
    pub(crate) fn new(of: usize) -> Votes {
        Votes {
            said: Vec::with_capacity(of),
            of,
        }
    }

    /// Records what `sentinel` (its index in the URL) said.
    pub(crate) fn record(&mut self, index: usize, sentinel: Arc<str>, said: Said) {
        let at = self.said.partition_point(|(_, _, i)| *i < index);
        self.said.insert(at, (sentinel, said, index));
    }

    /// How many of the URL's sentinels must name a node for it to be
    /// followed.
    pub(crate) fn majority(&self) -> usize {
        self.of / 2 + 1
    }

    /// The node a majority of the URL's sentinels names, if any (at most
    /// one can be).
    pub(crate) fn elected(&self) -> Option<&str> {
        self.said.iter().find_map(|(_, said, _)| match said {
            Said::Names(node) if self.votes_for(node) >= self.majority() => Some(node.as_str()),
            _ => None,
        })
    }

    /// How many sentinels name `node`.
    fn votes_for(&self, node: &str) -> usize {
        self.said
            .iter()
            .filter(|(_, said, _)| matches!(said, Said::Names(n) if n == node))
            .count()
    }

    /// Each sentinel heard that names a node, and whether it names a node
    /// other than `agreed` (the node the majority names, or else the
    /// master in use). With nothing agreed on, a sentinel dissents when
    /// another names a different node.
    pub(crate) fn dissent(&self, agreed: Option<&str>) -> Vec<(&Arc<str>, &str, bool)> {
        fn named((sentinel, said, _): &(Arc<str>, Said, usize)) -> Option<(&Arc<str>, &str)> {
            match said {
                Said::Names(node) => Some((sentinel, node.as_str())),
                _ => None,
            }
        }
        let split = self
            .said
            .iter()
            .filter_map(named)
            .any(|(_, node)| self.said.iter().filter_map(named).any(|(_, n)| n != node));
        self.said
            .iter()
            .filter_map(named)
            .map(|(sentinel, node)| {
                let dissents = match agreed {
                    Some(agreed) => node != agreed,
                    None => split,
                };
                (sentinel, node, dissents)
            })
            .collect()
    }

    /// The sentinels that name `node`, for a log line: `"S1, S2"`.
    pub(crate) fn naming(&self, node: &str) -> String {
        let names: Vec<&str> = self
            .said
            .iter()
            .filter(|(_, said, _)| matches!(said, Said::Names(n) if n == node))
            .map(|(sentinel, _, _)| &**sentinel)
            .collect();
        names.join(", ")
    }
}

/// What each sentinel said: `"S1 names M1; S2 names M1; S3 knows no
/// master named …; S4: no answer within 500ms"`.
impl fmt::Display for Votes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (sentinel, said, _)) in self.said.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match said {
                Said::Names(node) => write!(f, "{sentinel} names {node}")?,
                Said::KnowsNone => write!(f, "{sentinel} knows no such master")?,
                Said::Failed(why) => write!(f, "{sentinel}: {why}")?,
            }
        }
        let silent = self.of.saturating_sub(self.said.len());
        if silent > 0 {
            if !self.said.is_empty() {
                f.write_str("; ")?;
            }
            write!(f, "{silent} not waited for")?;
        }
        Ok(())
    }
}

/// A node a sentinel names, as `host:port` (an IPv6 host in brackets), or
/// why it is not taken: a host that is empty, too long or holds spaces or
/// control characters is no address (and would only end up in a log).
pub(crate) fn node_of(host: &str, port: u16) -> Result<String, String> {
    if host.is_empty()
        || host.len() > MAX_HOST
        || host.contains(|c: char| c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "named a host that is no address ({} bytes)",
            host.len()
        ));
    }
    Ok(if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn votes(of: usize, said: &[(&str, Said)]) -> Votes {
        let mut votes = Votes::new(of);
        // Recorded out of order, as answers come in.
        for (i, (sentinel, said)) in said.iter().enumerate().rev() {
            votes.record(i, (*sentinel).into(), said.clone());
        }
        votes
    }

    fn names(node: &str) -> Said {
        Said::Names(node.into())
    }

    #[test]
    fn a_node_is_elected_by_a_majority_of_the_urls_sentinels() {
        let two_of_three = votes(
            3,
            &[
                ("s1", names("m2")),
                ("s2", names("m1")),
                ("s3", names("m1")),
            ],
        );
        assert_eq!(two_of_three.elected(), Some("m1"));
        assert_eq!(two_of_three.naming("m1"), "s2, s3");
        // One sentinel is no majority of three, even when it alone answers.
        let alone = votes(3, &[("s1", names("m2"))]);
        assert_eq!(alone.elected(), None);
        let split = votes(
            3,
            &[
                ("s1", names("m2")),
                ("s2", names("m1")),
                ("s3", Said::Failed("down".into())),
            ],
        );
        assert_eq!(split.elected(), None);
        // Two of four is no majority either.
        let even = votes(
            4,
            &[
                ("a", names("m1")),
                ("b", names("m1")),
                ("c", names("m2")),
                ("d", names("m2")),
            ],
        );
        assert_eq!(even.elected(), None);
        assert_eq!(votes(1, &[("s", names("m"))]).elected(), Some("m"));
        assert_eq!(votes(3, &[("s", Said::KnowsNone)]).elected(), None);
    }

    #[test]
    fn dissent_is_what_names_another_node_than_the_agreed_one() {
        let v = votes(
            3,
            &[
                ("s1", names("m2")),
                ("s2", names("m1")),
                ("s3", Said::KnowsNone),
            ],
        );
        let against_m1: Vec<_> = v.dissent(Some("m1")).into_iter().filter(|d| d.2).collect();
        assert_eq!(against_m1.len(), 1);
        assert_eq!((&**against_m1[0].0, against_m1[0].1), ("s1", "m2"));
        // Nothing agreed on: two sentinels naming two nodes both dissent.
        assert!(v.dissent(None).iter().all(|d| d.2));
        let one = votes(3, &[("s1", names("m1"))]);
        assert!(one.dissent(None).iter().all(|d| !d.2));
        assert_eq!(
            v.to_string(),
            "s1 names m2; s2 names m1; s3 knows no such master"
        );
        assert_eq!(one.to_string(), "s1 names m1; 2 not waited for");
    }

    #[test]
    fn named_nodes_are_addresses_or_refused() {
        assert_eq!(node_of("::1", 6379).as_deref(), Ok("[::1]:6379"));
        assert_eq!(node_of("10.0.0.1", 6379).as_deref(), Ok("10.0.0.1:6379"));
        assert!(node_of("", 1).is_err());
        assert!(node_of("evil\nline", 1).is_err());
        assert!(node_of(&"h".repeat(256), 1).is_err());
    }
}
