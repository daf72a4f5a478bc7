package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrCorrupt wraps every decoding failure.
var ErrCorrupt = errors.New("kvevents: corrupt event batch")

// maxDepth bounds nesting while skipping unknown values, so hostile input
// cannot exhaust the stack.
const maxDepth = 64

// Decoder decodes batches, reusing its internal buffers across calls so a
// steady stream decodes without allocating. Slices in a Batch it filled
// (TokenIDs, BlockHashes, Hash.Bytes, ExtraKeys) stay valid only until the
// next Decode on the same Decoder; copy what you keep. A Decoder is not safe
// for concurrent use. The zero value is ready.
type Decoder struct {
	tokens []int32
	hashes []Hash
	raw    []byte
	extra  [][]byte
}

// DecodeBatch decodes one payload into a fresh Batch that owns its memory.
func DecodeBatch(payload []byte) (*Batch, error) {
	var d Decoder
	b := &Batch{}
	if err := d.Decode(payload, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Decode decodes payload into b, reusing b.Events.
func (d *Decoder) Decode(payload []byte, b *Batch) error {
	d.tokens, d.hashes, d.raw, d.extra = d.tokens[:0], d.hashes[:0], d.raw[:0], d.extra[:0]
	b.TS, b.DataParallelRank, b.Skipped = 0, OptInt{}, 0
	b.Events = b.Events[:0]
	r := reader{b: payload}
	if err := d.batch(&r, b); err != nil {
		return fmt.Errorf("%w: %w (at byte %d)", ErrCorrupt, err, r.i)
	}
	if r.i != len(payload) {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(payload)-r.i)
	}
	return nil
}

func (d *Decoder) batch(r *reader, b *Batch) error {
	n, isMap, err := r.container()
	if err != nil {
		return err
	}
	if isMap {
		for range n {
			key, err := r.str()
			if err != nil {
				return err
			}
			switch string(key) {
			case "ts":
				b.TS, err = r.float()
			case "events":
				err = d.events(r, b)
			case "data_parallel_rank", "attn_dp_rank":
				b.DataParallelRank, err = r.optInt()
			default:
				err = r.skip(0)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if n < 2 {
		return fmt.Errorf("batch array has %d elements", n)
	}
	if b.TS, err = r.float(); err != nil {
		return err
	}
	if err := d.events(r, b); err != nil {
		return err
	}
	if n > 2 {
		if b.DataParallelRank, err = r.optInt(); err != nil {
			return err
		}
	}
	for i := 3; i < n; i++ {
		if err := r.skip(0); err != nil {
			return err
		}
	}
	return nil
}

func (d *Decoder) events(r *reader, b *Batch) error {
	if r.nil() {
		return nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	b.Events = growEvents(b.Events, n)
	for range n {
		b.Events = append(b.Events, Event{})
		e := &b.Events[len(b.Events)-1]
		if err := d.event(r, e); err != nil {
			return err
		}
		if e.Type == TypeUnknown {
			b.Events = b.Events[:len(b.Events)-1]
			b.Skipped++
		}
	}
	return nil
}

func growEvents(s []Event, n int) []Event {
	if cap(s)-len(s) >= n {
		return s
	}
	out := make([]Event, len(s), len(s)+n)
	copy(out, s)
	return out
}

func eventType(tag []byte) EventType {
	switch string(tag) {
	case "BlockStored":
		return TypeBlockStored
	case "BlockRemoved":
		return TypeBlockRemoved
	case "AllBlocksCleared":
		return TypeAllBlocksCleared
	}
	return TypeUnknown
}

func (d *Decoder) event(r *reader, e *Event) error {
	n, isMap, err := r.container()
	if err != nil {
		return err
	}
	if isMap {
		for range n {
			var key []byte
			// Inline fixstr fast path: every key vLLM and SGLang send.
			if i := r.i; i < len(r.b) && r.b[i]&0xe0 == 0xa0 && i+1+int(r.b[i]&0x1f) <= len(r.b) {
				end := i + 1 + int(r.b[i]&0x1f)
				key, r.i = r.b[i+1:end], end
			} else if key, err = r.strSlow(); err != nil {
				return err
			}
			if err := d.field(r, e, fieldOf(key)); err != nil {
				return err
			}
		}
		return nil
	}
	if n == 0 {
		return errors.New("empty event array")
	}
	tag, err := r.str()
	if err != nil {
		return err
	}
	e.Type = eventType(tag)
	for i := 1; i < n; i++ {
		if err := d.field(r, e, positionalField(e.Type, i-1)); err != nil {
			return err
		}
	}
	return nil
}

type fieldID uint8

const (
	fUnknown fieldID = iota
	fType
	fBlockHashes
	fParent
	fTokenIDs
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroupIdx
	fSpecKind
	fSliding
	fLocality
)

// fieldOf maps a map key to its field. A string switch on constants beats
// hand-rolled length dispatch here: the compiler compares in registers.
func fieldOf(key []byte) fieldID {
	switch string(key) {
	case "type":
		return fType
	case "block_hashes":
		return fBlockHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokenIDs
	case "block_size":
		return fBlockSize
	case "lora_id":
		return fLoRAID
	case "medium":
		return fMedium
	case "lora_name":
		return fLoRAName
	case "extra_keys":
		return fExtraKeys
	case "group_idx":
		return fGroupIdx
	case "kv_cache_spec_kind":
		return fSpecKind
	case "kv_cache_spec_sliding_window":
		return fSliding
	case "locality":
		return fLocality
	}
	return fUnknown
}

// positionalField maps an element index after the tag to its field, per
// event type; SGLang shares vLLM's layout through medium. Beyond the known
// fields it returns fUnknown and the element is skipped.
func positionalField(t EventType, i int) fieldID {
	switch t {
	case TypeBlockStored:
		layout := [...]fieldID{fBlockHashes, fParent, fTokenIDs, fBlockSize, fLoRAID, fMedium,
			fLoRAName, fExtraKeys, fGroupIdx, fSpecKind, fSliding, fLocality}
		if i < len(layout) {
			return layout[i]
		}
	case TypeBlockRemoved:
		layout := [...]fieldID{fBlockHashes, fMedium, fGroupIdx, fLocality}
		if i < len(layout) {
			return layout[i]
		}
	}
	return fUnknown
}

// field decodes one named field. Required structure (hashes, tokens) must be
// well-formed; optional scalars of an unexpected type are skipped, because
// engines add and repurpose trailing fields across versions.
func (d *Decoder) field(r *reader, e *Event, f fieldID) error {
	if f >= fParent && r.i < len(r.b) && r.b[r.i] == 0xc0 {
		// None, the most common value of most fields: no call needed.
		r.i++
		setNone(e, f)
		return nil
	}
	var err error
	switch f {
	case fType:
		var tag []byte
		if tag, err = r.str(); err == nil {
			e.Type = eventType(tag)
		}
	case fBlockHashes:
		e.BlockHashes, err = d.hashList(r)
	case fParent:
		if r.nil() {
			e.HasParent = false
			return nil
		}
		e.ParentBlockHash, err = d.hash(r)
		e.HasParent = err == nil
	case fTokenIDs:
		e.TokenIDs, err = d.tokenList(r)
	case fBlockSize:
		var v OptInt
		v, err = r.optInt()
		e.BlockSize = int(v.V)
	case fLoRAID:
		e.LoRAID, err = r.lenientInt()
	case fMedium:
		e.Medium, err = r.lenientStr()
	case fLoRAName:
		e.LoRAName, err = r.lenientStr()
	case fExtraKeys:
		e.ExtraKeys, err = d.extraKeys(r)
	case fGroupIdx:
		e.GroupIdx, err = r.lenientInt()
	case fSpecKind:
		e.KVCacheSpecKind, err = r.lenientStr()
	case fSliding:
		e.KVCacheSpecSlidingWindow, err = r.lenientInt()
	case fLocality:
		e.Locality, err = r.lenientStr()
	default:
		err = r.skip(0)
	}
	return err
}

func (d *Decoder) hashList(r *reader) ([]Hash, error) {
	if r.nil() {
		return nil, nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	start := len(d.hashes)
	for range n {
		h, err := d.hash(r)
		if err != nil {
			return nil, err
		}
		d.hashes = append(d.hashes, h)
	}
	return d.hashes[start:len(d.hashes):len(d.hashes)], nil
}

func (d *Decoder) hash(r *reader) (Hash, error) {
	c, err := r.peek()
	if err != nil {
		return Hash{}, err
	}
	if c == 0xc4 || c == 0xc5 || c == 0xc6 {
		b, err := r.bin()
		if err != nil {
			return Hash{}, err
		}
		start := len(d.raw)
		d.raw = append(d.raw, b...)
		return BytesHash(d.raw[start:len(d.raw):len(d.raw)]), nil
	}
	v, err := r.intBits()
	return Hash{V: v}, err
}

func (d *Decoder) tokenList(r *reader) ([]int32, error) {
	if r.nil() {
		return nil, nil
	}
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	// n is bounded by the remaining input, so growing up front is safe and
	// lets the loop store by index instead of appending.
	start := len(d.tokens)
	d.tokens = slices.Grow(d.tokens, n)[:start+n]
	out := d.tokens[start : start+n : start+n]
	b, i := r.b, r.i
	for k := range out {
		if i >= len(b) {
			return nil, errShort
		}
		// Fast paths for the forms real vocabularies produce.
		switch c := b[i]; {
		case c < 0x80:
			out[k] = int32(c)
			i++
			continue
		case c == 0xcd && i+3 <= len(b):
			out[k] = int32(b[i+1])<<8 | int32(b[i+2])
			i += 3
			continue
		case c == 0xce && i+5 <= len(b) && b[i+1] < 0x80:
			out[k] = int32(binary.BigEndian.Uint32(b[i+1:]))
			i += 5
			continue
		case c == 0xcc && i+2 <= len(b):
			out[k] = int32(b[i+1])
			i += 2
			continue
		}
		r.i = i
		t, err := r.tokenOrPair()
		if err != nil {
			return nil, err
		}
		out[k] = t
		i = r.i
	}
	r.i = i
	return out, nil
}

// tokenOrPair reads a token id, or an SGLang EAGLE bigram [tok, tok] whose
// first element is the token.
func (r *reader) tokenOrPair() (int32, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c&0xf0 != 0x90 && c != 0xdc && c != 0xdd {
		return r.token()
	}
	m, err := r.arrayLen()
	if err != nil {
		return 0, err
	}
	if m == 0 {
		return 0, errors.New("empty token pair")
	}
	t, err := r.token()
	if err != nil {
		return 0, err
	}
	for j := 1; j < m; j++ {
		if err := r.skip(0); err != nil {
			return 0, err
		}
	}
	return t, nil
}

func (d *Decoder) extraKeys(r *reader) ([][]byte, error) {
	if r.nil() {
		return nil, nil
	}
	n, err := r.arrayLen()
	if err != nil {
		// Not a list: tolerate and ignore (an unknown future shape).
		return nil, r.skip(0)
	}
	start := len(d.extra)
	for range n {
		if r.nil() {
			d.extra = append(d.extra, nil)
			continue
		}
		from := r.i
		if err := r.skip(0); err != nil {
			return nil, err
		}
		s := len(d.raw)
		d.raw = append(d.raw, r.b[from:r.i]...)
		d.extra = append(d.extra, d.raw[s:len(d.raw):len(d.raw)])
	}
	return d.extra[start:len(d.extra):len(d.extra)], nil
}

// setNone resets field f to its None value (fields can repeat in a map;
// the last occurrence wins).
func setNone(e *Event, f fieldID) {
	switch f {
	case fParent:
		e.ParentBlockHash, e.HasParent = Hash{}, false
	case fTokenIDs:
		e.TokenIDs = nil
	case fBlockSize:
		e.BlockSize = 0
	case fLoRAID:
		e.LoRAID = OptInt{}
	case fMedium:
		e.Medium = ""
	case fLoRAName:
		e.LoRAName = ""
	case fExtraKeys:
		e.ExtraKeys = nil
	case fGroupIdx:
		e.GroupIdx = OptInt{}
	case fSpecKind:
		e.KVCacheSpecKind = ""
	case fSliding:
		e.KVCacheSpecSlidingWindow = OptInt{}
	case fLocality:
		e.Locality = ""
	}
}

// reader is a bounds-checked msgpack cursor. Every method either advances
// past a complete value or returns an error; none panics on short input.
type reader struct {
	b []byte
	i int
}

var errShort = errors.New("truncated input")

func (r *reader) peek() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errShort
	}
	return r.b[r.i], nil
}

func (r *reader) next(n int) ([]byte, error) {
	if n < 0 || len(r.b)-r.i < n {
		return nil, errShort
	}
	s := r.b[r.i : r.i+n]
	r.i += n
	return s, nil
}

// nil consumes a nil if one is next.
func (r *reader) nil() bool {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		return true
	}
	return false
}

// length reads an n-byte big-endian length and checks that at least
// n*minSize bytes remain, so a forged header cannot force a huge allocation.
func (r *reader) length(n, minSize int) (int, error) {
	s, err := r.next(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	if v > uint64(len(r.b)-r.i)/uint64(minSize) {
		return 0, fmt.Errorf("length %d exceeds input", v)
	}
	return int(v), nil
}

func (r *reader) container() (n int, isMap bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c&0xf0 == 0x90:
		r.i++
		n = int(c & 0x0f)
	case c&0xf0 == 0x80:
		r.i++
		n, isMap = int(c&0x0f), true
	case c == 0xdc:
		r.i++
		n, err = r.length(2, 1)
	case c == 0xdd:
		r.i++
		n, err = r.length(4, 1)
	case c == 0xde:
		r.i++
		n, err = r.length(2, 2)
		isMap = true
	case c == 0xdf:
		r.i++
		n, err = r.length(4, 2)
		isMap = true
	default:
		return 0, false, fmt.Errorf("want array or map, got 0x%02x", c)
	}
	if err == nil && n > (len(r.b)-r.i) {
		err = fmt.Errorf("container of %d exceeds input", n)
	}
	return n, isMap, err
}

func (r *reader) arrayLen() (int, error) {
	n, isMap, err := r.container()
	if err != nil {
		return 0, err
	}
	if isMap {
		return 0, errors.New("want array, got map")
	}
	return n, nil
}

func (r *reader) str() ([]byte, error) {
	// Fast path: every key and tag vLLM sends is a fixstr.
	if i := r.i; i < len(r.b) {
		if c := r.b[i]; c&0xe0 == 0xa0 {
			end := i + 1 + int(c&0x1f)
			if end <= len(r.b) {
				r.i = end
				return r.b[i+1 : end], nil
			}
		}
	}
	return r.strSlow()
}

func (r *reader) strSlow() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n int
	switch {
	case c&0xe0 == 0xa0:
		r.i++
		n = int(c & 0x1f)
	case c == 0xd9:
		r.i++
		n, err = r.length(1, 1)
	case c == 0xda:
		r.i++
		n, err = r.length(2, 1)
	case c == 0xdb:
		r.i++
		n, err = r.length(4, 1)
	default:
		return nil, fmt.Errorf("want string, got 0x%02x", c)
	}
	if err != nil {
		return nil, err
	}
	return r.next(n)
}

func (r *reader) bin() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n int
	switch c {
	case 0xc4:
		r.i++
		n, err = r.length(1, 1)
	case 0xc5:
		r.i++
		n, err = r.length(2, 1)
	case 0xc6:
		r.i++
		n, err = r.length(4, 1)
	default:
		return nil, fmt.Errorf("want bytes, got 0x%02x", c)
	}
	if err != nil {
		return nil, err
	}
	return r.next(n)
}

// intBits reads any msgpack integer and returns its 64-bit pattern (signed
// values as two's complement), which is how hashes of either signedness are
// keyed.
func (r *reader) intBits() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c < 0x80 {
		r.i++
		return uint64(c), nil
	}
	if c >= 0xe0 {
		r.i++
		return uint64(int64(int8(c))), nil
	}
	var size int
	switch c {
	case 0xcc, 0xd0:
		size = 1
	case 0xcd, 0xd1:
		size = 2
	case 0xce, 0xd2:
		size = 4
	case 0xcf, 0xd3:
		size = 8
	default:
		return 0, fmt.Errorf("want integer, got 0x%02x", c)
	}
	r.i++
	s, err := r.next(size)
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xcc:
		return uint64(s[0]), nil
	case 0xcd:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 0xce:
		return uint64(binary.BigEndian.Uint32(s)), nil
	case 0xcf:
		return binary.BigEndian.Uint64(s), nil
	case 0xd0:
		return uint64(int64(int8(s[0]))), nil
	case 0xd1:
		return uint64(int64(int16(binary.BigEndian.Uint16(s)))), nil
	case 0xd2:
		return uint64(int64(int32(binary.BigEndian.Uint32(s)))), nil
	}
	return binary.BigEndian.Uint64(s), nil
}

// int reads an integer that must fit int64.
func (r *reader) int() (int64, error) {
	c, _ := r.peek()
	v, err := r.intBits()
	if err != nil {
		return 0, err
	}
	if c == 0xcf && v > math.MaxInt64 {
		return 0, fmt.Errorf("integer %d overflows int64", v)
	}
	return int64(v), nil
}

func (r *reader) token() (int32, error) {
	v, err := r.int()
	if err != nil {
		return 0, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("token id %d out of range", v)
	}
	return int32(v), nil
}

func (r *reader) optInt() (OptInt, error) {
	if r.nil() {
		return OptInt{}, nil
	}
	v, err := r.int()
	return OptInt{V: v, Valid: err == nil}, err
}

// lenientInt reads an optional integer, skipping a value of another type.
func (r *reader) lenientInt() (OptInt, error) {
	c, err := r.peek()
	if err != nil {
		return OptInt{}, err
	}
	if c == 0xc0 || c < 0x80 || c >= 0xe0 || (c >= 0xcc && c <= 0xd3) {
		return r.optInt()
	}
	return OptInt{}, r.skip(0)
}

// lenientStr reads an optional string, skipping a value of another type.
// Values vLLM actually sends are interned to avoid an allocation per event.
func (r *reader) lenientStr() (string, error) {
	c, err := r.peek()
	if err != nil {
		return "", err
	}
	if !(c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb) {
		return "", r.skip(0)
	}
	s, err := r.str()
	if err != nil {
		return "", err
	}
	switch string(s) {
	case "GPU":
		return "GPU", nil
	case "CPU":
		return "CPU", nil
	case "full_attention":
		return "full_attention", nil
	case "sliding_window":
		return "sliding_window", nil
	case "LOCAL":
		return "LOCAL", nil
	case "REMOTE":
		return "REMOTE", nil
	}
	return string(s), nil
}

func (r *reader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xcb:
		r.i++
		s, err := r.next(8)
		if err != nil {
			return 0, err
		}
		return math.Float64frombits(binary.BigEndian.Uint64(s)), nil
	case 0xca:
		r.i++
		s, err := r.next(4)
		if err != nil {
			return 0, err
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(s))), nil
	}
	v, err := r.int()
	if err != nil {
		return 0, fmt.Errorf("want timestamp: %w", err)
	}
	return float64(v), nil
}

// skip advances past one complete value of any type.
func (r *reader) skip(depth int) error {
	if depth > maxDepth {
		return errors.New("nesting too deep")
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	switch {
	case c < 0x80 || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.i++
		return nil
	case c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb:
		_, err = r.str()
		return err
	case c == 0xc4 || c == 0xc5 || c == 0xc6:
		_, err = r.bin()
		return err
	case c&0xf0 == 0x90 || c&0xf0 == 0x80 || c == 0xdc || c == 0xdd || c == 0xde || c == 0xdf:
		n, isMap, err := r.container()
		if err != nil {
			return err
		}
		if isMap {
			n *= 2
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	r.i++
	var n int
	switch c {
	case 0xcc, 0xd0, 0xd4:
		n = 1
	case 0xcd, 0xd1, 0xd5:
		n = 2
	case 0xce, 0xd2, 0xca, 0xd6:
		n = 4
	case 0xcf, 0xd3, 0xcb, 0xd7:
		n = 8
	case 0xd8:
		n = 16
	case 0xc7, 0xc8, 0xc9: // ext: length, type byte, data
		size := 1 << (c - 0xc7) // 1, 2 or 4 length bytes
		l, err := r.length(size, 1)
		if err != nil {
			return err
		}
		n = l + 1
	default:
		return fmt.Errorf("invalid msgpack byte 0x%02x", c)
	}
	if c >= 0xd4 && c <= 0xd8 {
		n++ // fixext type byte
	}
	_, err = r.next(n)
	return err
}
