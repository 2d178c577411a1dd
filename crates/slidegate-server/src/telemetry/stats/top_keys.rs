//! The most denied keys right now: a space-saving sketch (Metwally et
//! al.) of bounded size, and the keys as shown, truncated.

use serde::Serialize;

/// Longest key shown, in characters; a longer one is cut and ends with `…`.
pub const MAX_KEY_CHARS: usize = 64;

/// One entry of the top denied keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TopKey {
    /// The key, truncated to [`MAX_KEY_CHARS`] characters.
    pub key: String,
    /// Denials counted (decayed), an over-estimate by at most `error`.
    pub count: u64,
    /// How much of `count` may belong to keys this entry replaced.
    pub error: u64,
}

/// A space-saving sketch of the most frequent keys, in at most `capacity`
/// entries.
#[derive(Debug)]
pub struct TopKeys {
    entries: Vec<TopKey>,
    capacity: usize,
}

impl TopKeys {
    /// An empty sketch of `capacity` entries.
    pub const fn new(capacity: usize) -> TopKeys {
        TopKeys {
            entries: Vec::new(),
            capacity,
        }
    }

    /// Counts one occurrence of `key` (already truncated).
    pub fn add(&mut self, key: &str) {
        if let Some(entry) = self.entries.iter_mut().find(|e| e.key == key) {
            entry.count += 1;
            return;
        }
        if self.entries.len() < self.capacity {
            self.entries.push(TopKey {
                key: key.to_owned(),
                count: 1,
                error: 0,
            });
            return;
        }
        // The least counted entry gives its place, and its count as the
        // newcomer's possible error.
        if let Some(least) = self.entries.iter_mut().min_by_key(|e| e.count) {
            least.key.clear();
            least.key.push_str(key);
            least.error = least.count;
            least.count += 1;
        }
    }

    /// Halves every count, dropping the entries that reach zero.
    pub fn decay(&mut self) {
        for entry in &mut self.entries {
            entry.count /= 2;
            entry.error /= 2;
        }
        self.entries.retain(|e| e.count > 0);
    }

    /// The entries, most counted first.
    pub fn top(&self) -> Vec<TopKey> {
        let mut top = self.entries.clone();
        top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        top
    }
}

/// `parts` joined, cut to [`MAX_KEY_CHARS`] characters with `…` at the end
/// when longer; never copies more than that from a client's value.
pub fn truncated_key<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let mut key = String::with_capacity(MAX_KEY_CHARS + 3);
    let mut chars = 0;
    for part in parts {
        for c in part.chars() {
            if chars == MAX_KEY_CHARS {
                key.push('…');
                return key;
            }
            key.push(c);
            chars += 1;
        }
    }
    key
}

/// A descriptor's key as shown: `domain: key=value, key=value`, truncated.
pub fn descriptor_key(domain: &str, entries: &[(String, String)]) -> String {
    let mut parts: Vec<&str> = Vec::with_capacity(2 + entries.len() * 4);
    parts.push(domain);
    parts.push(": ");
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            parts.push(", ");
        }
        parts.push(k);
        parts.push("=");
        parts.push(v);
    }
    truncated_key(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_frequent_keys_stay_in_a_full_sketch() {
        // 250 occurrences in 8 entries: any key seen more than 250/8 times
        // is kept.
        let mut top = TopKeys::new(8);
        for round in 0..100 {
            top.add("hot");
            if round % 2 == 0 {
                top.add("warm");
            }
            top.add(&format!("cold-{round}"));
        }
        let keys: Vec<String> = top.top().into_iter().map(|e| e.key).collect();
        assert_eq!(keys[0], "hot");
        assert!(keys.contains(&"warm".to_owned()), "{keys:?}");
        assert_eq!(keys.len(), 8);
    }

    #[test]
    fn counts_over_estimate_by_at_most_their_error() {
        let mut top = TopKeys::new(2);
        for _ in 0..5 {
            top.add("a");
        }
        top.add("b");
        top.add("c");
        let c = top.top().into_iter().find(|e| e.key == "c").unwrap();
        assert!(c.count - c.error <= 1, "{c:?}");
    }

    #[test]
    fn decay_halves_and_forgets() {
        let mut top = TopKeys::new(4);
        for _ in 0..4 {
            top.add("a");
        }
        top.add("b");
        top.decay();
        assert_eq!(
            top.top(),
            vec![TopKey {
                key: "a".into(),
                count: 2,
                error: 0
            }]
        );
    }

    #[test]
    fn long_keys_are_cut_with_an_ellipsis() {
        let long = "x".repeat(1000);
        let key = truncated_key([long.as_str()]);
        assert_eq!(key.chars().count(), MAX_KEY_CHARS + 1);
        assert!(key.ends_with('…'));
        assert_eq!(truncated_key(["short"]), "short");
        // Multi-byte characters are counted as characters, never split.
        let key = truncated_key(["é".repeat(100).as_str()]);
        assert_eq!(key.chars().count(), MAX_KEY_CHARS + 1);
    }

    #[test]
    fn a_descriptor_key_names_its_domain_and_entries() {
        let entries = vec![
            ("remote_address".to_owned(), "10.0.0.1".to_owned()),
            ("path".to_owned(), "/login".to_owned()),
        ];
        assert_eq!(
            descriptor_key("api", &entries),
            "api: remote_address=10.0.0.1, path=/login"
        );
    }
}
