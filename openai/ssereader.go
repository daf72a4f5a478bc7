package openai

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
)

// MaxSSELine bounds one server-sent-events line read by ReadSSELine's
// callers: the first chunk of a completion may carry the prompt's token ids
// (return_token_ids, prompt_token_ids), about 8 bytes per token, so a
// 1M-token prompt fits with room.
const MaxSSELine = 64 << 20

// ErrSSELineTooLong: a line passed the bound given to ReadSSELine.
var ErrSSELineTooLong = errors.New("openai: SSE line too long")

// ReadSSELine reads one line of an SSE stream, its "\n" included (none at
// a final unterminated line, returned with io.EOF). A line that does not
// fit r's buffer is reassembled in *long (reused across calls, so a stream
// of long lines allocates once), up to maxLine bytes: past it the read
// stops with ErrSSELineTooLong, so a peer cannot make the reader hold an
// unbounded line. The result is valid until the next call.
//
// It is the one SSE line reader: engine/upstream's streams and bench's
// client use it (the server side writes SSE with the Append* encoders).
func ReadSSELine(r *bufio.Reader, long *[]byte, maxLine int) ([]byte, error) {
	b, err := r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return b, err
	}
	*long = append((*long)[:0], b...)
	for errors.Is(err, bufio.ErrBufferFull) {
		if len(*long) > maxLine {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrSSELineTooLong, maxLine)
		}
		b, err = r.ReadSlice('\n')
		*long = append(*long, b...)
	}
	if len(*long) > maxLine {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrSSELineTooLong, maxLine)
	}
	return *long, err
}

// SSEData returns the value of a "data:" line (line ending and leading
// spaces trimmed) and whether the line was one. Other fields, comments
// (": ping") and blank separators give false.
func SSEData(line []byte) ([]byte, bool) {
	line = bytes.TrimRight(line, "\r\n")
	p, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return nil, false
	}
	return bytes.TrimLeft(p, " "), true
}
