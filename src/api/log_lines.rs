//! CRI log lines (`<time> <stream> <P|F> <text>`) turned back into what the program wrote,
//! with kubelet's log options applied line by line: `since` (lines written before it are
//! skipped), `timestamps` (each new line, not the continuation of a partial one, prefixed with
//! its time to the nanosecond, `2006-01-02T15:04:05.000000000Z07:00`) and `limitBytes` (the
//! output stops there, mid-line if need be). Pure: the reader feeds it bytes.

/// The options, and where the output stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lines {
    /// Skip lines written before this (nanoseconds since the epoch).
    pub since: Option<i128>,
    pub timestamps: bool,
    /// Bytes still to be sent; none: no limit.
    pub remaining: Option<u64>,
    /// The last line passed on was partial (`P`): the next one continues it.
    continuing: bool,
}

impl Lines {
    pub fn new(since: Option<i128>, timestamps: bool, limit: Option<u64>) -> Lines {
        Lines { since, timestamps, remaining: limit, continuing: false }
    }

    /// Whether the byte limit has been reached (nothing more is to be sent).
    pub fn done(&self) -> bool {
        self.remaining == Some(0)
    }

    /// Appends the text of the complete lines in `bytes` to `out`.
    pub fn decode(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        for line in NonEmptyLines(bytes) {
            let mut parts = line.splitn(4, |b| *b == b' ');
            let (time, stream, tag, text) = (parts.next(), parts.next(), parts.next(), parts.next());
            let (text, partial): (&[u8], bool) = match (stream, tag, text) {
                (Some(b"stdout" | b"stderr"), Some(b"P"), Some(t)) => (t, true),
                (Some(b"stdout" | b"stderr"), Some(b"F"), t) => (t.unwrap_or_default(), false),
                _ => {
                    // Not a CRI line: passed on whole, with no time to judge it by.
                    out.extend_from_slice(line);
                    out.push(b'\n');
                    self.continuing = false;
                    continue;
                }
            };
            // The time is read only when an option needs it (a 1 GiB log has 10 million lines).
            let time = if self.since.is_some() || self.timestamps {
                time.and_then(|t| std::str::from_utf8(t).ok())
            } else {
                None
            };
            if let (Some(since), Some(at)) = (self.since, time.and_then(crate::rfc3339::parse_nanos)) {
                if at < since {
                    self.continuing = partial;
                    continue;
                }
            }
            if self.timestamps && !self.continuing {
                if let Some(t) = time {
                    out.extend_from_slice(fixed_nanos(t).as_bytes());
                    out.push(b' ');
                }
            }
            out.extend_from_slice(text);
            if !partial {
                out.push(b'\n');
            }
            self.continuing = partial;
        }
        if let Some(left) = self.remaining.as_mut() {
            let added = (out.len() - start) as u64;
            if added > *left {
                out.truncate(start + *left as usize);
            }
            *left = left.saturating_sub(added);
        }
    }
}

/// The non-empty lines of a buffer, found a word at a time (a 1 GiB log has 10 million
/// lines; a byte-at-a-time search was a third of the cost of serving it).
struct NonEmptyLines<'a>(&'a [u8]);

impl<'a> Iterator for NonEmptyLines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        loop {
            if self.0.is_empty() {
                return None;
            }
            let end = newline(self.0).unwrap_or(self.0.len());
            let line = &self.0[..end];
            self.0 = self.0.get(end + 1..).unwrap_or_default();
            if !line.is_empty() {
                return Some(line);
            }
        }
    }
}

/// The index of the first `\n` in `b`, eight bytes at a time.
fn newline(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while let Some(word) = b.get(i..i + 8) {
        let x = u64::from_le_bytes(word.try_into().unwrap_or_default()) ^ (ONES * u64::from(b'\n'));
        if (x.wrapping_sub(ONES) & !x & HIGHS) != 0 {
            break;
        }
        i += 8;
    }
    b.get(i..)?.iter().position(|c| *c == b'\n').map(|p| i + p)
}

/// `t` (RFC 3339) with exactly nine fractional digits, its zone kept.
fn fixed_nanos(t: &str) -> String {
    // A time that is not RFC 3339 (any field of a hand-made line) may hold a multi-byte
    // character across byte 19: then it is kept whole.
    let (clock, rest) = t.split_at_checked(t.len().min(19)).unwrap_or((t, ""));
    let (frac, zone) = match rest.strip_prefix('.') {
        Some(r) => r.split_at(r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len())),
        None => ("", rest),
    };
    format!("{clock}.{frac:0<9}{zone}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &[u8] = b"2026-11-22T18:55:17.5Z stdout F one\n\
2026-11-22T18:55:18.000000001Z stderr P par\n\
2026-11-22T18:55:18.2Z stderr F tial\n\
2026-11-22T18:55:19+01:00 stdout F three\n\
not a cri line\n";

    fn run(mut l: Lines) -> String {
        let mut out = Vec::new();
        l.decode(LOG, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_are_split_at_every_newline_whatever_the_alignment() {
        for len in 0..40 {
            for at in 0..len {
                let mut b = vec![b'x'; len];
                b[at] = b'\n';
                assert_eq!(newline(&b), Some(at), "{len} {at}");
            }
            assert_eq!(newline(&vec![b'x'; len]), None);
        }
        let got: Vec<&[u8]> = NonEmptyLines(b"a\n\nbc\n\n\ndef").collect();
        assert_eq!(got, [&b"a"[..], b"bc", b"def"]);
    }

    #[test]
    fn the_text_comes_back_as_written() {
        assert_eq!(run(Lines::default()), "one\npartial\nthree\nnot a cri line\n");
    }

    #[test]
    fn timestamps_prefix_each_new_line_with_nine_digits() {
        let l = Lines { timestamps: true, ..Lines::default() };
        assert_eq!(
            run(l),
            "2026-11-22T18:55:17.500000000Z one\n2026-11-22T18:55:18.000000001Z partial\n\
2026-11-22T18:55:19.000000000+01:00 three\nnot a cri line\n"
        );
    }

    #[test]
    fn a_time_with_a_multi_byte_character_is_shown_not_a_panic() {
        let mut out = Vec::new();
        Lines::new(None, true, None).decode("2026-11-22T18:55:1é7Z stdout F x\n".as_bytes(), &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "2026-11-22T18:55:1é7Z.000000000 x\n");
    }

    #[test]
    fn since_skips_what_was_written_before() {
        let at = crate::rfc3339::parse_nanos("2026-11-22T18:55:18Z").unwrap();
        assert_eq!(run(Lines { since: Some(at), ..Lines::default() }), "partial\nnot a cri line\n");
        // 18:55:19+01:00 is 17:55:19 UTC: before one's 18:55:17.5.
        let at = crate::rfc3339::parse_nanos("2026-11-22T18:00:00Z").unwrap();
        assert_eq!(run(Lines { since: Some(at), ..Lines::default() }), "one\npartial\nnot a cri line\n");
    }

    #[test]
    fn the_byte_limit_cuts_mid_line_and_then_nothing_more() {
        let mut l = Lines { remaining: Some(6), ..Lines::default() };
        let mut out = Vec::new();
        l.decode(LOG, &mut out);
        assert_eq!(out, b"one\npa");
        assert!(l.done());
        l.decode(LOG, &mut out);
        assert_eq!(out, b"one\npa", "nothing after the limit");
        let mut l = Lines { remaining: Some(100), ..Lines::default() };
        let mut out = Vec::new();
        l.decode(LOG, &mut out);
        assert_eq!(l.remaining, Some(100 - out.len() as u64));
    }
}
