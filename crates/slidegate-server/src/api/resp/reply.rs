//! Writing replies in RESP2 or RESP3, whichever the connection speaks
//! (`HELLO 3` switches it).

/// The protocol version of a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// RESP2, what every connection starts with.
    #[default]
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

/// The replies of one connection, written into one buffer so that the
/// answers to a pipeline go out in one write.
#[derive(Debug, Default)]
pub struct Replies {
    out: Vec<u8>,
    /// The protocol the next replies are written in.
    pub protocol: Protocol,
}

impl Replies {
    /// The bytes written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.out
    }

    /// Forgets the bytes written (once sent).
    pub fn clear(&mut self) {
        self.out.clear();
    }

    /// True when nothing waits to be sent.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// `+text`; `text` must hold no CR or LF.
    pub fn simple(&mut self, text: &str) {
        self.line(b'+', text.as_bytes());
    }

    /// `-text`: an error, its first word its kind (`ERR`, `NOAUTH`, ...).
    /// CR and LF in `text` become spaces.
    pub fn error(&mut self, text: &str) {
        self.out.push(b'-');
        self.out.extend(
            text.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.out.extend_from_slice(b"\r\n");
    }

    /// `:n`.
    pub fn integer(&mut self, n: i64) {
        self.line(b':', itoa::Buffer::new().format(n).as_bytes());
    }

    /// `$len\r\nbytes`.
    pub fn bulk(&mut self, bytes: &[u8]) {
        self.line(b'$', itoa::Buffer::new().format(bytes.len()).as_bytes());
        self.out.extend_from_slice(bytes);
        self.out.extend_from_slice(b"\r\n");
    }

    /// RESP2's null bulk string, RESP3's null.
    pub fn null(&mut self) {
        match self.protocol {
            Protocol::Resp2 => self.out.extend_from_slice(b"$-1\r\n"),
            Protocol::Resp3 => self.out.extend_from_slice(b"_\r\n"),
        }
    }

    /// The header of an array of `len` replies, which follow.
    pub fn array(&mut self, len: usize) {
        self.line(b'*', itoa::Buffer::new().format(len).as_bytes());
    }

    /// The header of a map of `len` pairs (RESP3), or of the flat array
    /// of `2 * len` replies RESP2 writes instead; the pairs follow.
    pub fn map(&mut self, len: usize) {
        match self.protocol {
            Protocol::Resp2 => self.array(2 * len),
            Protocol::Resp3 => self.line(b'%', itoa::Buffer::new().format(len).as_bytes()),
        }
    }

    /// An array of integers, the shape of every decision's reply.
    pub fn integers(&mut self, values: &[i64]) {
        self.array(values.len());
        for &value in values {
            self.integer(value);
        }
    }

    fn line(&mut self, kind: u8, text: &[u8]) {
        self.out.push(kind);
        self.out.extend_from_slice(text);
        self.out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_reply_as_redis_writes_it() {
        let mut replies = Replies::default();
        replies.simple("OK");
        replies.error("ERR bad\r\nthing");
        replies.integers(&[0, -1]);
        replies.bulk(b"hi");
        replies.null();
        replies.map(1);
        assert_eq!(
            replies.bytes(),
            b"+OK\r\n-ERR bad  thing\r\n*2\r\n:0\r\n:-1\r\n$2\r\nhi\r\n$-1\r\n*2\r\n"
        );
        replies.clear();
        replies.protocol = Protocol::Resp3;
        replies.null();
        replies.map(2);
        assert_eq!(replies.bytes(), b"_\r\n%2\r\n");
    }
}
