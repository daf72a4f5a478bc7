package structured

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// jv is a JSON value that keeps object key order (a schema's properties
// are generated in the order written).
type jv struct {
	kind byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	keys []string
	vals []*jv
	arr  []*jv
	str  string
	num  json.Number
	b    bool
}

// maxSchemaBytes and maxSchemaDepth bound what the compiler reads.
const (
	maxSchemaBytes = 4 << 20
	maxSchemaDepth = 256
)

func parseJSON(data []byte) (*jv, error) {
	if len(data) > maxSchemaBytes {
		return nil, fmt.Errorf("structured: schema of %d bytes (limit %d)", len(data), maxSchemaBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readJV(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("structured: schema: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("structured: schema: trailing data")
	}
	return v, nil
}

func readJV(dec *json.Decoder, depth int) (*jv, error) {
	if depth > maxSchemaDepth {
		return nil, errors.New("nested too deep")
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		switch x {
		case '{':
			v := &jv{kind: 'o'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				val, err := readJV(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if i := v.index(k); i >= 0 {
					v.vals[i] = val // last duplicate wins, as encoding/json
					continue
				}
				v.keys = append(v.keys, k)
				v.vals = append(v.vals, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return v, nil
		case '[':
			v := &jv{kind: 'a'}
			for dec.More() {
				e, err := readJV(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, e)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return v, nil
		}
		return nil, fmt.Errorf("unexpected %v", x)
	case string:
		return &jv{kind: 's', str: x}, nil
	case json.Number:
		return &jv{kind: 'n', num: x}, nil
	case bool:
		return &jv{kind: 'b', b: x}, nil
	case nil:
		return &jv{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", t)
}

func (v *jv) index(k string) int {
	for i, kk := range v.keys {
		if kk == k {
			return i
		}
	}
	return -1
}

func (v *jv) get(k string) *jv {
	if v == nil || v.kind != 'o' {
		return nil
	}
	if i := v.index(k); i >= 0 {
		return v.vals[i]
	}
	return nil
}

// encode writes v as compact JSON (keys in order, strings as
// encoding/json escapes them without HTML escaping).
func (v *jv) encode(sb *strings.Builder) {
	switch v.kind {
	case 'o':
		sb.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			writeJSONString(sb, k)
			sb.WriteByte(':')
			v.vals[i].encode(sb)
		}
		sb.WriteByte('}')
	case 'a':
		sb.WriteByte('[')
		for i, e := range v.arr {
			if i > 0 {
				sb.WriteByte(',')
			}
			e.encode(sb)
		}
		sb.WriteByte(']')
	case 's':
		writeJSONString(sb, v.str)
	case 'n':
		sb.WriteString(v.num.String())
	case 'b':
		if v.b {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
	default:
		sb.WriteString("null")
	}
}

func writeJSONString(sb *strings.Builder, s string) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	sb.Write(bytes.TrimRight(buf.Bytes(), "\n"))
}
