package httpapi

import "strings"

// stopMatcher applies stop strings to streamed text. Text that could be the
// start of a stop string is held back until it is ruled out, so a client
// never sees part of a stop string; at the end of the stream the held text
// is flushed.
type stopMatcher struct {
	stops   []string
	pending string
	// end, after a push that stopped, is where the matched stop string
	// ends in the held text followed by the pushed text: what maps a
	// match back to the token that completed it (return_token_ids).
	end int
}

// push adds text and returns what can be emitted now, and whether a stop
// string matched (in which case the stream ends: the stop text and anything
// after it are dropped).
func (m *stopMatcher) push(text string) (emit string, stopped bool) {
	if len(m.stops) == 0 {
		return text, false
	}
	s := m.pending + text
	cut := -1
	for _, st := range m.stops {
		if i := strings.Index(s, st); i >= 0 && (cut < 0 || i < cut) {
			cut, m.end = i, i+len(st)
		}
	}
	if cut >= 0 {
		m.pending = ""
		return s[:cut], true
	}
	hold := 0
	for _, st := range m.stops {
		// Longest suffix of s that is a proper prefix of st.
		for n := min(len(st)-1, len(s)); n > hold; n-- {
			if strings.HasSuffix(s, st[:n]) {
				hold = n
				break
			}
		}
	}
	m.pending = s[len(s)-hold:]
	return s[:len(s)-hold], false
}

// flush returns the held text at the end of the stream.
func (m *stopMatcher) flush() string {
	s := m.pending
	m.pending = ""
	return s
}
