//! What Kubernetes' request-info rules read from a collection GET's query
//! string: whether it is a watch, and the object name a
//! `fieldSelector=metadata.name=NAME` pins it to. Kubernetes decodes the
//! whole query as list options first (Go's `url.ParseQuery`, then the
//! typed fields and the selectors) and, when any of that fails, keeps only
//! a simpler reading of `watch` and no name; both readings are here.

use std::borrow::Cow;

/// More `&`-separated pairs than this and Go's query parser (behind
/// Kubernetes' `req.URL.Query()`) gives up and sees no parameter at all.
const MAX_QUERY_PARAMS: usize = 10_000;

/// The list options of a collection GET, as far as request info uses them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ListQuery {
    /// Whether the request is a watch rather than a list.
    pub(crate) watch: bool,
    /// The object name a `metadata.name` field selector requires, when it
    /// is one Kubernetes accepts as a name.
    pub(crate) name: Option<String>,
}

/// The first value of each parameter request info looks at, decoded.
#[derive(Default)]
struct Params {
    watch: Option<Vec<u8>>,
    field_selector: Option<Vec<u8>>,
    limit: Option<Vec<u8>>,
    timeout_seconds: Option<Vec<u8>>,
}

impl ListQuery {
    /// Reads `query` (the raw query string, without `?`; any bytes, as Go
    /// takes them) as Kubernetes reads a collection GET's.
    pub(crate) fn parse(query: &[u8]) -> ListQuery {
        let params = Params::parse(query);
        // Kubernetes decodes every list option; a malformed number or
        // field selector fails the whole decoding. (So does a malformed
        // label selector, which is not checked here: docs/middleware.md.)
        let decoded = params.limit.as_deref().is_none_or(is_int64)
            && params.timeout_seconds.as_deref().is_none_or(is_int64);
        let selector = match (&params.field_selector, decoded) {
            (_, false) => Err(()),
            (None, true) => Ok(None),
            (Some(raw), true) => field_selector_name(raw),
        };
        let Ok(name) = selector else {
            // The fallback reading: `watch` by its lower-cased first value,
            // no name.
            let watch = params
                .watch
                .as_deref()
                .is_some_and(|v| !(v == b"0" || v.eq_ignore_ascii_case(b"false")));
            return ListQuery { watch, name: None };
        };
        ListQuery {
            watch: params
                .watch
                .as_deref()
                .is_some_and(|v| !(v == b"0" || folds_to_false(v))),
            name: name.filter(|n| is_path_segment_name(n)),
        }
    }

    /// Only the `watch` parameter's value, already decoded (`None` when
    /// absent): the reading of a caller that passes nothing else.
    pub(crate) fn from_watch_value(watch: Option<&str>) -> ListQuery {
        let watch = watch.is_some_and(|v| v != "0" && !folds_to_false(v.as_bytes()));
        ListQuery { watch, name: None }
    }
}

impl Params {
    /// Go's `url.ParseQuery`, keeping the first value of the keys request
    /// info reads.
    fn parse(query: &[u8]) -> Params {
        let mut params = Params::default();
        if query.iter().filter(|&&b| b == b'&').count() + 1 > MAX_QUERY_PARAMS {
            return params;
        }
        for pair in query.split(|&b| b == b'&') {
            // A pair with a `;` is refused, an empty one skipped.
            if pair.is_empty() || pair.contains(&b';') {
                continue;
            }
            let (key, value) = match pair.iter().position(|&b| b == b'=') {
                Some(eq) => (&pair[..eq], &pair[eq + 1..]),
                None => (pair, &pair[..0]),
            };
            let (Some(key), Some(value)) = (unescape(key), unescape(value)) else {
                continue;
            };
            let slot = match &*key {
                b"watch" => &mut params.watch,
                b"fieldSelector" => &mut params.field_selector,
                b"limit" => &mut params.limit,
                b"timeoutSeconds" => &mut params.timeout_seconds,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(value.into_owned());
            }
        }
        params
    }
}

/// A query component decoded as Go decodes it: `+` is a space, `%XX` a
/// byte; `None` for a `%` without two hex digits after it.
fn unescape(raw: &[u8]) -> Option<Cow<'_, [u8]>> {
    if !raw.iter().any(|&b| b == b'%' || b == b'+') {
        return Some(Cow::Borrowed(raw));
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'%' => {
                let hi = hex(*raw.get(i + 1)?)?;
                let lo = hex(*raw.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(Cow::Owned(out))
}

/// Whether Go's `strconv.ParseInt(s, 10, 64)` accepts `s`.
fn is_int64(s: &[u8]) -> bool {
    std::str::from_utf8(s).is_ok_and(|s| s.parse::<i64>().is_ok())
}

/// Whether `v` equals `false` under Unicode simple case folding (Go's
/// `strings.EqualFold`), where `ſ` (U+017F) folds to `s`.
fn folds_to_false(v: &[u8]) -> bool {
    let Ok(v) = std::str::from_utf8(v) else {
        return false;
    };
    let mut chars = v.chars();
    let ok = "false".chars().all(|want| {
        chars
            .next()
            .is_some_and(|c| c.eq_ignore_ascii_case(&want) || (want == 's' && c == '\u{17F}'))
    });
    ok && chars.next().is_none()
}

/// The name a field selector requires `metadata.name` to equal (its first
/// such term in byte order, as Kubernetes sorts terms), `Ok(None)` when it
/// requires none, `Err` when Kubernetes refuses the selector.
fn field_selector_name(selector: &[u8]) -> Result<Option<String>, ()> {
    let mut terms = split_terms(selector);
    terms.sort_unstable();
    let mut name = None;
    for term in terms {
        if term.is_empty() {
            continue;
        }
        let (field, equal, value) = split_term(term).ok_or(())?;
        let value = unescape_selector_value(value)?;
        if equal && name.is_none() && field == b"metadata.name" {
            name = Some(value);
        }
    }
    // A name that is not UTF-8 names no object libapf can hand out.
    Ok(name.and_then(|n| String::from_utf8(n).ok()))
}

/// The selector's terms: split at each comma that no backslash escapes.
fn split_terms(selector: &[u8]) -> Vec<&[u8]> {
    let mut terms = Vec::new();
    if selector.is_empty() {
        return terms;
    }
    let (mut start, mut escaped) = (0, false);
    for (i, &b) in selector.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == b',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// A term's field, whether its operator is an equality (`=` or `==`, not
/// `!=`), and its raw value: split at the first operator.
fn split_term(term: &[u8]) -> Option<(&[u8], bool, &[u8])> {
    (0..term.len()).find_map(|i| {
        let rest = &term[i..];
        if rest.starts_with(b"!=") {
            Some((&term[..i], false, &rest[2..]))
        } else if rest.starts_with(b"==") {
            Some((&term[..i], true, &rest[2..]))
        } else if rest.starts_with(b"=") {
            Some((&term[..i], true, &rest[1..]))
        } else {
            None
        }
    })
}

/// A selector value with its escapes (`\\`, `\,`, `\=`) resolved; `Err`
/// for another escape, a trailing backslash, or a bare `,` or `=`.
fn unescape_selector_value(raw: &[u8]) -> Result<Vec<u8>, ()> {
    let mut out = Vec::with_capacity(raw.len());
    let mut escaped = false;
    for &b in raw {
        match (escaped, b) {
            (true, b'\\' | b',' | b'=') => {
                out.push(b);
                escaped = false;
            }
            (true, _) => return Err(()),
            (false, b'\\') => escaped = true,
            (false, b',' | b'=') => return Err(()),
            (false, b) => out.push(b),
        }
    }
    if escaped {
        return Err(());
    }
    Ok(out)
}

/// Whether Kubernetes accepts `name` as an object name in a URL path
/// segment: not `.` or `..`, no `/` or `%`.
fn is_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains(['/', '%'])
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn q(query: &str) -> (bool, Option<String>) {
        let l = ListQuery::parse(query.as_bytes());
        (l.watch, l.name)
    }

    #[test]
    fn watch_is_any_first_value_but_0_or_false() {
        assert_eq!(q(""), (false, None));
        assert_eq!(q("watch"), (true, None));
        assert_eq!(q("watch="), (true, None));
        assert_eq!(q("watch=FaLsE"), (false, None));
        assert_eq!(q("watch=0&watch=1"), (false, None));
        assert_eq!(q("w%61tch=1"), (true, None));
        assert_eq!(q("watch=fal%C5%BFe"), (false, None));
        // A malformed limit fails Kubernetes' decoding: then `ſ` is no `s`.
        assert_eq!(q("watch=fal%C5%BFe&limit=x"), (true, None));
        assert_eq!(q("watch;x=1"), (false, None));
        assert_eq!(q("watch=%zz"), (false, None));
        assert!(ListQuery::parse(b"watch=\xff").watch);
    }

    #[test]
    fn a_metadata_name_selector_names_the_object() {
        let named = |n: &str| (false, Some(n.to_string()));
        assert_eq!(q("fieldSelector=metadata.name%3Dp"), named("p"));
        assert_eq!(q("fieldSelector=metadata.name==p"), named("p"));
        assert_eq!(q("fieldSelector=metadata.name!=p"), (false, None));
        assert_eq!(
            q("fieldSelector=metadata.name=b,metadata.name=a"),
            named("a")
        );
        assert_eq!(q("fieldSelector=a=1,metadata.name=x\\,y"), named("x,y"));
        assert_eq!(q("fieldSelector=metadata.name=x,y"), (false, None));
        assert_eq!(q("fieldSelector=metadata.name=.."), (false, None));
        assert_eq!(q("fieldSelector=metadata.name=a/b"), (false, None));
        assert_eq!(q("fieldSelector=metadata.name=p&limit=-3"), named("p"));
        assert_eq!(q("fieldSelector=metadata.name=p&limit="), (false, None));
        assert_eq!(
            q("fieldSelector=metadata.name=p&timeoutSeconds=1e3"),
            (false, None)
        );
    }

    #[test]
    fn past_go_s_parameter_limit_no_parameter_counts() {
        let at_limit = format!("watch=1{}", "&x".repeat(MAX_QUERY_PARAMS - 1));
        assert_eq!(q(&at_limit), (true, None));
        let past_limit = format!("{at_limit}&x");
        assert_eq!(q(&past_limit), (false, None));
    }
}
