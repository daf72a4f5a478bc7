package structured

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// UnsupportedError names a schema keyword (or value) the compiler cannot
// honour; the request is refused before any token is generated.
type UnsupportedError struct {
	Keyword string // the keyword, e.g. "patternProperties"
	Path    string // JSON pointer of the schema holding it
	Reason  string
}

func (e *UnsupportedError) Error() string {
	s := fmt.Sprintf("structured: unsupported JSON Schema keyword %q at %s", e.Keyword, e.Path)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// annotations are keywords that do not constrain an instance (or that the
// validator treats as annotations), ignored by the compiler.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "example": true,
	"$schema": true, "$id": true, "id": true, "$comment": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "nullable": true, "discriminator": true, "xml": true,
	"externalDocs": true, "contentMediaType": true, "contentEncoding": true, "contentSchema": true,
	"$anchor": true, "$dynamicAnchor": true, "$vocabulary": true, "$defs": true, "definitions": true,
	"strict": true,
	// OpenAPI documents' schema container (references into it resolve
	// like $defs).
	"components": true,
}

// handled are the keywords the compiler honours.
var handled = map[string]bool{
	"type": true, "enum": true, "const": true, "properties": true, "required": true,
	"additionalProperties": true, "items": true, "prefixItems": true, "additionalItems": true,
	"minItems": true, "maxItems": true, "uniqueItems": true, "minLength": true, "maxLength": true,
	"pattern": true, "format": true, "minimum": true, "maximum": true, "exclusiveMinimum": true,
	"exclusiveMaximum": true, "multipleOf": true, "anyOf": true, "oneOf": true, "allOf": true,
	"$ref": true, "minProperties": true, "maxProperties": true, "unevaluatedProperties": true,
	"unevaluatedItems": true, "patternProperties": true,
}

type schemaCompiler struct {
	b     *builder
	j     *jsonRules
	root  *jv
	refs  map[string]int32
	depth int
}

// CompileJSONSchema compiles a JSON Schema (drafts 4 to 2020-12, the
// keywords listed in the package doc) to a grammar of compact JSON.
func CompileJSONSchema(schema []byte) (*Grammar, error) {
	root, err := parseJSON(schema)
	if err != nil {
		return nil, err
	}
	b := newBuilder()
	c := &schemaCompiler{b: b, j: newJSONRules(b), root: root, refs: map[string]int32{}}
	r, err := c.compile(root, "#")
	if err != nil {
		return nil, err
	}
	b.alt(0, ref(r))
	return b.finish()
}

// CompileJSONObject is any JSON object (response_format json_object).
func CompileJSONObject() (*Grammar, error) {
	b := newBuilder()
	j := newJSONRules(b)
	b.alt(0, ref(j.mapOf(j.genericValue(genericDepth-1), 0, -1)))
	return b.finish()
}

func unsupported(kw, path, reason string) error {
	return &UnsupportedError{Keyword: kw, Path: path, Reason: reason}
}

func unsat(path, why string) error {
	return fmt.Errorf("%w: %s at %s", ErrUnsatisfiable, why, path)
}

func (c *schemaCompiler) compile(s *jv, path string) (int32, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxSchemaDepth {
		return 0, unsupported("$ref", path, "schema nesting too deep")
	}
	if c.b.err != nil {
		return 0, c.b.err
	}
	switch s.kind {
	case 'b':
		if s.b {
			return c.j.genericValue(genericDepth - 1), nil
		}
		return 0, unsat(path, "schema false")
	case 'o':
	default:
		return 0, fmt.Errorf("structured: schema at %s is not an object or boolean", path)
	}
	for _, k := range s.keys {
		if handled[k] || annotations[k] || strings.HasPrefix(k, "x-") {
			continue
		}
		return 0, unsupported(k, path, "")
	}
	if pp := s.get("patternProperties"); pp != nil && !(pp.kind == 'o' && len(pp.keys) == 0) {
		return 0, unsupported("patternProperties", path, "")
	}
	if rv := s.get("$ref"); rv != nil {
		return c.compileRef(s, rv, path)
	}
	if all := s.get("allOf"); all != nil {
		if all.kind != 'a' || len(all.arr) == 0 {
			return 0, unsupported("allOf", path, "not a non-empty array")
		}
		merged := without(s, "allOf")
		for i, sub := range all.arr {
			sub, err := c.resolve(sub, fmt.Sprintf("%s/allOf/%d", path, i))
			if err != nil {
				return 0, err
			}
			if merged, err = merge(merged, sub, path); err != nil {
				return 0, err
			}
		}
		return c.compile(merged, path)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		alts := s.get(kw)
		if alts == nil {
			continue
		}
		if alts.kind != 'a' || len(alts.arr) == 0 {
			return 0, unsupported(kw, path, "not a non-empty array")
		}
		rest := without(s, kw)
		hasRest := constraining(rest)
		r := c.b.newRule(kw)
		n := 0
		for i, sub := range alts.arr {
			p := fmt.Sprintf("%s/%s/%d", path, kw, i)
			if kw == "oneOf" && !c.exclusive(alts.arr, i) {
				// An output of this branch might match another one too,
				// which oneOf forbids: generate from the others only.
				continue
			}
			if hasRest {
				rs, err := c.resolve(sub, p)
				if err != nil {
					return 0, err
				}
				if sub, err = merge(rest, rs, p); err != nil {
					return 0, err
				}
			}
			sr, err := c.compile(sub, p)
			if errors.Is(err, ErrUnsatisfiable) {
				continue // a branch that accepts nothing is left out
			}
			if err != nil {
				return 0, err
			}
			c.b.alt(r, ref(sr))
			n++
		}
		if n == 0 {
			if kw == "oneOf" {
				return 0, unsupported("oneOf", path, "no branch is provably exclusive of the others")
			}
			return 0, unsat(path, kw+" with no satisfiable branch")
		}
		return r, nil
	}
	return c.compileTyped(s, path)
}

// typeSet is a set of JSON types as bits; integer and number share
// numBit.
type typeSet uint8

const (
	objBit typeSet = 1 << iota
	arrBit
	strBit
	numBit
	boolBit
	nullBit
	allBits = objBit | arrBit | strBit | numBit | boolBit | nullBit
)

func typeBit(t string) typeSet {
	switch t {
	case "object":
		return objBit
	case "array":
		return arrBit
	case "string":
		return strBit
	case "number", "integer":
		return numBit
	case "boolean":
		return boolBit
	case "null":
		return nullBit
	}
	return allBits
}

// accepts is a superset of the JSON types schema s accepts.
func (c *schemaCompiler) accepts(s *jv, depth int) typeSet {
	if depth > 16 {
		return allBits
	}
	if s.kind == 'b' {
		if s.b {
			return allBits
		}
		return 0
	}
	if s.kind != 'o' {
		return allBits
	}
	if rv := s.get("$ref"); rv != nil {
		if t, err := c.lookup(rv, ""); err == nil {
			return c.accepts(t, depth+1)
		}
		return allBits
	}
	out := allBits
	if tv := s.get("type"); tv != nil {
		out = 0
		for _, t := range typeList(tv) {
			out |= typeBit(t)
		}
	}
	for _, kw := range []string{"enum", "const"} {
		if ev := s.get(kw); ev != nil {
			var ts typeSet
			vals := []*jv{ev}
			if kw == "enum" {
				vals = ev.arr
			}
			for _, v := range vals {
				ts |= typeBit(kindType(v))
			}
			out &= ts
		}
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if av := s.get(kw); av != nil && av.kind == 'a' {
			var ts typeSet
			for _, sub := range av.arr {
				ts |= c.accepts(sub, depth+1)
			}
			out &= ts
		}
	}
	if av := s.get("allOf"); av != nil && av.kind == 'a' {
		for _, sub := range av.arr {
			out &= c.accepts(sub, depth+1)
		}
	}
	return out
}

// exclusive reports whether nothing branch i accepts is accepted by another
// branch of a oneOf: their types are disjoint, or they are objects told
// apart by a required property with disjoint const/enum values.
func (c *schemaCompiler) exclusive(branches []*jv, i int) bool {
	ti := c.accepts(branches[i], 0)
	for j, b := range branches {
		if j == i {
			continue
		}
		common := ti & c.accepts(b, 0)
		if common == 0 {
			continue
		}
		if common == objBit && c.discriminated(branches[i], b) {
			continue
		}
		return false
	}
	return true
}

// discriminated: a and b require a property whose allowed const/enum
// values do not meet.
func (c *schemaCompiler) discriminated(a, b *jv) bool {
	a, _ = c.resolve(a, "")
	b, _ = c.resolve(b, "")
	if a == nil || b == nil {
		return false
	}
	values := func(s *jv, p string) []string {
		req := s.get("required")
		if req == nil || !slices.ContainsFunc(req.arr, func(x *jv) bool { return x.kind == 's' && x.str == p }) {
			return nil
		}
		ps := s.get("properties").get(p)
		if ps == nil {
			return nil
		}
		var out []string
		if cv := ps.get("const"); cv != nil {
			var sb strings.Builder
			cv.encode(&sb)
			return []string{sb.String()}
		}
		if ev := ps.get("enum"); ev != nil {
			for _, v := range ev.arr {
				var sb strings.Builder
				v.encode(&sb)
				out = append(out, sb.String())
			}
		}
		return out
	}
	pa := a.get("properties")
	if pa == nil {
		return false
	}
	for _, p := range pa.keys {
		va, vb := values(a, p), values(b, p)
		if va == nil || vb == nil {
			continue
		}
		if !slices.ContainsFunc(va, func(x string) bool { return slices.Contains(vb, x) }) {
			return true
		}
	}
	return false
}

// constraining reports whether s has keywords other than annotations.
func constraining(s *jv) bool {
	for _, k := range s.keys {
		if !annotations[k] && !strings.HasPrefix(k, "x-") {
			return true
		}
	}
	return false
}

func without(s *jv, kw string) *jv {
	out := &jv{kind: 'o'}
	for i, k := range s.keys {
		if k != kw {
			out.keys = append(out.keys, k)
			out.vals = append(out.vals, s.vals[i])
		}
	}
	return out
}

// resolve follows $ref chains (without siblings) to a schema.
func (c *schemaCompiler) resolve(s *jv, path string) (*jv, error) {
	for i := 0; i < 64; i++ {
		rv := s.get("$ref")
		if rv == nil {
			return s, nil
		}
		t, err := c.lookup(rv, path)
		if err != nil {
			return nil, err
		}
		rest := without(s, "$ref")
		if constraining(rest) {
			return merge(rest, t, path)
		}
		s = t
	}
	return nil, unsupported("$ref", path, "reference chain too long")
}

func (c *schemaCompiler) lookup(rv *jv, path string) (*jv, error) {
	if rv.kind != 's' || !strings.HasPrefix(rv.str, "#") {
		return nil, unsupported("$ref", path, "only references inside the schema (#...) are supported")
	}
	cur := c.root
	p := strings.TrimPrefix(rv.str, "#")
	if p == "" {
		return cur, nil
	}
	if !strings.HasPrefix(p, "/") {
		return nil, unsupported("$ref", path, "anchors are not supported")
	}
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if u, err := unescapePct(tok); err == nil {
			tok = u
		}
		switch cur.kind {
		case 'o':
			cur = cur.get(tok)
		case 'a':
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur.arr) {
				cur = nil
			} else {
				cur = cur.arr[i]
			}
		default:
			cur = nil
		}
		if cur == nil {
			return nil, unsupported("$ref", path, fmt.Sprintf("%q not found", rv.str))
		}
	}
	return cur, nil
}

func unescapePct(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", err
			}
			out = append(out, byte(v))
			i += 2
			continue
		}
		out = append(out, s[i])
	}
	return string(out), nil
}

func (c *schemaCompiler) compileRef(s, rv *jv, path string) (int32, error) {
	rest := without(s, "$ref")
	t, err := c.lookup(rv, path)
	if err != nil {
		return 0, err
	}
	if constraining(rest) {
		m, err := merge(rest, t, path)
		if err != nil {
			return 0, err
		}
		return c.compile(m, path)
	}
	if r, ok := c.refs[rv.str]; ok {
		return r, nil
	}
	r := c.b.newRule("ref")
	c.refs[rv.str] = r
	body, err := c.compile(t, rv.str)
	if err != nil {
		return 0, err
	}
	c.b.alt(r, ref(body))
	return r, nil
}

// merge is the conjunction of two schema objects where it can be written
// as one schema; a conflict it cannot express is refused naming allOf.
func merge(a, b *jv, path string) (*jv, error) {
	if b.kind == 'b' {
		if b.b {
			return a, nil
		}
		return b, nil
	}
	if a.kind == 'b' {
		if a.b {
			return b, nil
		}
		return a, nil
	}
	if a.kind != 'o' || b.kind != 'o' {
		return nil, unsupported("allOf", path, "subschema is not an object")
	}
	if hasExtraProps(a, b) || hasExtraProps(b, a) {
		return nil, unsupported("allOf", path, "additionalProperties with properties from another subschema")
	}
	out := &jv{kind: 'o', keys: slices.Clone(a.keys), vals: slices.Clone(a.vals)}
	for i, k := range b.keys {
		bv := b.vals[i]
		j := out.index(k)
		if j < 0 {
			out.keys = append(out.keys, k)
			out.vals = append(out.vals, bv)
			continue
		}
		av := out.vals[j]
		if annotations[k] || strings.HasPrefix(k, "x-") || sameJSON(av, bv) {
			continue
		}
		var nv *jv
		switch k {
		case "required":
			nv = &jv{kind: 'a', arr: slices.Clone(av.arr)}
			for _, e := range bv.arr {
				if !slices.ContainsFunc(nv.arr, func(x *jv) bool { return sameJSON(x, e) }) {
					nv.arr = append(nv.arr, e)
				}
			}
		case "properties":
			nv = &jv{kind: 'o', keys: slices.Clone(av.keys), vals: slices.Clone(av.vals)}
			for pi, pk := range bv.keys {
				if x := nv.index(pk); x >= 0 {
					nv.vals[x] = &jv{kind: 'o', keys: []string{"allOf"}, vals: []*jv{{kind: 'a', arr: []*jv{nv.vals[x], bv.vals[pi]}}}}
				} else {
					nv.keys = append(nv.keys, pk)
					nv.vals = append(nv.vals, bv.vals[pi])
				}
			}
		case "type":
			ta, tb := typeList(av), typeList(bv)
			nv = &jv{kind: 'a'}
			for _, t := range ta {
				for _, u := range tb {
					switch {
					case t == u:
						nv.arr = append(nv.arr, &jv{kind: 's', str: t})
					case t == "integer" && u == "number", t == "number" && u == "integer":
						nv.arr = append(nv.arr, &jv{kind: 's', str: "integer"})
					}
				}
			}
		case "minimum", "minLength", "minItems", "minProperties":
			nv = av
			if num(bv) > num(av) {
				nv = bv
			}
		case "maximum", "maxLength", "maxItems", "maxProperties":
			nv = av
			if num(bv) < num(av) {
				nv = bv
			}
		case "items", "additionalProperties":
			if av.kind == 'a' || bv.kind == 'a' {
				return nil, unsupported("allOf", path, "conflicting "+k)
			}
			m, err := merge(av, bv, path)
			if err != nil {
				return nil, err
			}
			nv = m
		case "allOf", "anyOf", "oneOf":
			nv = &jv{kind: 'o', keys: []string{"allOf"}, vals: []*jv{{kind: 'a', arr: []*jv{wrap(k, av), wrap(k, bv)}}}}
			k = "allOf"
			out.keys[j] = "allOf"
		default:
			return nil, unsupported("allOf", path, "conflicting "+k)
		}
		out.vals[j] = nv
		_ = k
	}
	return out, nil
}

func wrap(k string, v *jv) *jv { return &jv{kind: 'o', keys: []string{k}, vals: []*jv{v}} }

// hasExtraProps reports whether a restricts additional properties while b
// names properties a does not.
func hasExtraProps(a, b *jv) bool {
	ap := a.get("additionalProperties")
	if ap == nil || (ap.kind == 'b' && ap.b) {
		return false
	}
	bp := b.get("properties")
	if bp == nil {
		return false
	}
	aprops := a.get("properties")
	for _, k := range bp.keys {
		if aprops.get(k) == nil {
			return true
		}
	}
	return false
}

func sameJSON(a, b *jv) bool {
	var x, y strings.Builder
	a.encode(&x)
	b.encode(&y)
	return x.String() == y.String()
}

func num(v *jv) float64 {
	if v == nil || v.kind != 'n' {
		return math.NaN()
	}
	f, _ := v.num.Float64()
	return f
}

func typeList(v *jv) []string {
	if v == nil {
		return nil
	}
	if v.kind == 's' {
		return []string{v.str}
	}
	var out []string
	for _, e := range v.arr {
		if e.kind == 's' {
			out = append(out, e.str)
		}
	}
	return out
}

var allTypes = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

func (c *schemaCompiler) compileTyped(s *jv, path string) (int32, error) {
	var types []string
	if tv := s.get("type"); tv != nil {
		types = typeList(tv)
		for _, t := range types {
			if !slices.Contains(allTypes, t) {
				return 0, unsupported("type", path, fmt.Sprintf("unknown type %q", t))
			}
		}
		if slices.Contains(types, "number") && slices.Contains(types, "integer") {
			types = slices.DeleteFunc(types, func(t string) bool { return t == "integer" })
		}
		if len(types) == 0 {
			return 0, unsat(path, "no type")
		}
	}
	if ev := s.get("enum"); ev != nil {
		if ev.kind != 'a' {
			return 0, unsupported("enum", path, "not an array")
		}
		return c.literals(ev.arr, types, s, path)
	}
	if cv := s.get("const"); cv != nil {
		return c.literals([]*jv{cv}, types, s, path)
	}
	if types == nil {
		// No type: the keywords present say which kind of value to
		// generate (a subset of everything the schema accepts).
		switch {
		case s.get("properties") != nil || s.get("required") != nil || s.get("additionalProperties") != nil ||
			s.get("minProperties") != nil || s.get("maxProperties") != nil:
			types = []string{"object"}
		case s.get("items") != nil || s.get("prefixItems") != nil || s.get("minItems") != nil || s.get("maxItems") != nil:
			types = []string{"array"}
		case s.get("pattern") != nil || s.get("minLength") != nil || s.get("maxLength") != nil || s.get("format") != nil:
			types = []string{"string"}
		case s.get("minimum") != nil || s.get("maximum") != nil || s.get("exclusiveMinimum") != nil ||
			s.get("exclusiveMaximum") != nil || s.get("multipleOf") != nil:
			types = []string{"number"}
		default:
			return c.j.genericValue(genericDepth - 1), nil
		}
	}
	r := c.b.newRule("typed")
	n := 0
	for _, t := range types {
		var tr int32
		var err error
		switch t {
		case "object":
			tr, err = c.object(s, path)
		case "array":
			tr, err = c.array(s, path)
		case "string":
			tr, err = c.str(s, path)
		case "number", "integer":
			tr, err = c.number(s, t == "integer", path)
		case "boolean":
			tr = c.j.boolean
		case "null":
			tr = c.j.null
		}
		if errors.Is(err, ErrUnsatisfiable) && len(types) > 1 {
			continue
		}
		if err != nil {
			return 0, err
		}
		c.b.alt(r, ref(tr))
		n++
	}
	if n == 0 {
		return 0, unsat(path, "no satisfiable type")
	}
	return r, nil
}

// literals is enum/const: the values' compact encodings, those of an
// allowed type only.
func (c *schemaCompiler) literals(vals []*jv, types []string, s *jv, path string) (int32, error) {
	r := c.b.newRule("enum")
	n := 0
	for _, v := range vals {
		if types != nil && !slices.Contains(types, kindType(v)) &&
			!(kindType(v) == "integer" && slices.Contains(types, "number")) {
			continue
		}
		if v.kind == 's' && !c.literalStringOK(v.str, s) {
			continue
		}
		var sb strings.Builder
		v.encode(&sb)
		c.b.alt(r, lit(sb.String())...)
		n++
	}
	if n == 0 {
		return 0, unsat(path, "no enum value of the schema's type")
	}
	return r, nil
}

// literalStringOK checks an enum string against sibling length bounds.
func (c *schemaCompiler) literalStringOK(v string, s *jv) bool {
	n := len([]rune(v))
	if m := s.get("minLength"); m != nil && float64(n) < num(m) {
		return false
	}
	if m := s.get("maxLength"); m != nil && float64(n) > num(m) {
		return false
	}
	return true
}

func kindType(v *jv) string {
	switch v.kind {
	case 'o':
		return "object"
	case 'a':
		return "array"
	case 's':
		return "string"
	case 'n':
		if r, ok := new(big.Rat).SetString(v.num.String()); ok && r.IsInt() {
			return "integer"
		}
		return "number"
	case 'b':
		return "boolean"
	}
	return "null"
}

// count reads a non-negative integer keyword; -1 when absent.
func count(s *jv, kw, path string) (int, error) {
	v := s.get(kw)
	if v == nil {
		return -1, nil
	}
	f := num(v)
	if math.IsNaN(f) || f < 0 || f != math.Trunc(f) {
		return 0, unsupported(kw, path, "not a non-negative integer")
	}
	if f > 1<<30 {
		f = 1 << 30
	}
	return int(f), nil
}

type prop struct {
	name     string
	schema   *jv
	required bool
}

func (c *schemaCompiler) object(s *jv, path string) (int32, error) {
	minP, err := count(s, "minProperties", path)
	if err != nil {
		return 0, err
	}
	maxP, err := count(s, "maxProperties", path)
	if err != nil {
		return 0, err
	}
	var props []prop
	if pv := s.get("properties"); pv != nil {
		if pv.kind != 'o' {
			return 0, unsupported("properties", path, "not an object")
		}
		for i, k := range pv.keys {
			props = append(props, prop{name: k, schema: pv.vals[i]})
		}
	}
	addl := s.get("additionalProperties")
	addlFalse := addl != nil && addl.kind == 'b' && !addl.b
	if up := s.get("unevaluatedProperties"); up != nil && up.kind == 'b' && !up.b {
		addlFalse = addlFalse || true
	}
	if rv := s.get("required"); rv != nil {
		if rv.kind != 'a' {
			return 0, unsupported("required", path, "not an array")
		}
		for _, e := range rv.arr {
			if e.kind != 's' {
				return 0, unsupported("required", path, "not an array of strings")
			}
			i := slices.IndexFunc(props, func(p prop) bool { return p.name == e.str })
			if i >= 0 {
				props[i].required = true
				continue
			}
			if addlFalse {
				return 0, unsat(path, fmt.Sprintf("required %q is not allowed by additionalProperties", e.str))
			}
			sch := addl
			if sch == nil {
				sch = &jv{kind: 'b', b: true}
			}
			props = append(props, prop{name: e.str, schema: sch, required: true})
		}
	}
	nreq := 0
	for _, p := range props {
		if p.required {
			nreq++
		}
	}
	if len(props) == 0 {
		if addlFalse {
			if minP > 0 {
				return 0, unsat(path, "minProperties with no properties allowed")
			}
			return c.b.seqRule("empty", lit("{}")...), nil
		}
		if minP > 1 {
			return 0, unsupported("minProperties", path, "above 1 with no named properties")
		}
		var val int32
		if addl != nil && !(addl.kind == 'b') {
			if val, err = c.compile(addl, path+"/additionalProperties"); err != nil {
				return 0, err
			}
		} else {
			val = c.j.genericValue(genericDepth - 2)
		}
		return c.j.mapOf(val, max(minP, 0), maxP), nil
	}
	// Promote optional properties for minProperties; keep only as many
	// optional ones as maxProperties leaves room for.
	for i := range props {
		if minP > nreq && !props[i].required {
			props[i].required = true
			nreq++
		}
	}
	if minP > nreq {
		return 0, unsupported("minProperties", path, "more than the named properties")
	}
	if maxP >= 0 {
		if nreq > maxP {
			return 0, unsat(path, "more required properties than maxProperties")
		}
		room := maxP - nreq
		kept := props[:0]
		for _, p := range props {
			if p.required || room > 0 {
				if !p.required {
					room--
				}
				kept = append(kept, p)
			}
		}
		props = kept
	}
	// Members in order: first[i] (nothing written yet) and after[i]
	// (something written), built from the end.
	n := len(props)
	members := make([]int32, n)
	for i, p := range props {
		var sb strings.Builder
		writeJSONString(&sb, p.name)
		v, err := c.compile(p.schema, path+"/properties/"+p.name)
		if err != nil {
			if errors.Is(err, ErrUnsatisfiable) && !p.required {
				members[i] = -1
				continue
			}
			return 0, err
		}
		members[i] = c.b.seqRule("member", append(lit(sb.String()+":"), ref(c.j.ws), ref(v))...)
	}
	first := c.b.seqRule("end", nil...)
	after := first
	for i := n - 1; i >= 0; i-- {
		p := props[i]
		nf, na := c.b.newRule("first"), c.b.newRule("after")
		if members[i] >= 0 {
			c.b.alt(nf, ref(members[i]), ref(after))
			c.b.alt(na, oneByte(','), ref(c.j.ws), ref(members[i]), ref(after))
		}
		if !p.required {
			c.b.alt(nf, ref(first))
			c.b.alt(na, ref(after))
		}
		first, after = nf, na
	}
	return c.b.seqRule("object", oneByte('{'), ref(first), oneByte('}')), nil
}

func (c *schemaCompiler) array(s *jv, path string) (int32, error) {
	minI, err := count(s, "minItems", path)
	if err != nil {
		return 0, err
	}
	maxI, err := count(s, "maxItems", path)
	if err != nil {
		return 0, err
	}
	minI = max(minI, 0)
	if u := s.get("uniqueItems"); u != nil && u.kind == 'b' && u.b {
		// Distinct items are not a context-free property; at most one
		// item is always unique.
		if minI > 1 {
			return 0, unsupported("uniqueItems", path, "with minItems above 1")
		}
		if maxI < 0 || maxI > 1 {
			maxI = 1
		}
	}
	if s.get("contains") != nil {
		return 0, unsupported("contains", path, "")
	}
	var prefix []*jv
	var extra *jv // schema of items past the prefix; nil: none allowed
	if pi := s.get("prefixItems"); pi != nil {
		if pi.kind != 'a' {
			return 0, unsupported("prefixItems", path, "not an array")
		}
		prefix = pi.arr
		extra = s.get("items")
		if extra == nil {
			extra = &jv{kind: 'b', b: true}
		}
	} else if it := s.get("items"); it != nil && it.kind == 'a' {
		prefix = it.arr
		extra = s.get("additionalItems")
		if extra == nil {
			extra = &jv{kind: 'b', b: true}
		}
	} else {
		extra = it
		if extra == nil {
			extra = &jv{kind: 'b', b: true}
		}
	}
	if ui := s.get("unevaluatedItems"); ui != nil && ui.kind == 'b' && !ui.b && s.get("items") == nil {
		extra = &jv{kind: 'b', b: false}
	}
	extraOK := !(extra.kind == 'b' && !extra.b)
	if !extraOK {
		if maxI < 0 || maxI > len(prefix) {
			maxI = len(prefix)
		}
	}
	if maxI >= 0 && minI > maxI {
		return 0, unsat(path, "minItems above maxItems")
	}
	if minI > maxRepeatMax {
		return 0, unsupported("minItems", path, "too large")
	}
	var extraRule int32 = -1
	if extraOK && (maxI < 0 || maxI > len(prefix)) {
		if extraRule, err = c.compile(extra, path+"/items"); err != nil {
			if !errors.Is(err, ErrUnsatisfiable) {
				return 0, err
			}
			extraRule = -1
			if maxI < 0 || maxI > len(prefix) {
				maxI = len(prefix)
			}
			if minI > maxI {
				return 0, unsat(path, "items unsatisfiable")
			}
		}
	}
	if len(prefix) == 0 {
		if extraRule < 0 {
			if minI > 0 {
				return 0, unsat(path, "no items allowed")
			}
			return c.b.seqRule("empty", lit("[]")...), nil
		}
		return c.j.array(extraRule, minI, maxI), nil
	}
	// Tuple: tail[i] follows i written items (i >= 1).
	n := len(prefix)
	if maxI >= 0 && maxI < n {
		n = maxI
	}
	items := make([]int32, n)
	for i := 0; i < n; i++ {
		r, err := c.compile(prefix[i], fmt.Sprintf("%s/prefixItems/%d", path, i))
		if err != nil {
			if errors.Is(err, ErrUnsatisfiable) && i >= minI {
				n = i
				break
			}
			return 0, err
		}
		items[i] = r
	}
	items = items[:n]
	var tail int32 // after n items
	{
		tail = c.b.newRule("tail")
		if extraRule >= 0 && (maxI < 0 || maxI > n) && n == len(prefix) {
			more := -1
			if maxI >= 0 {
				more = maxI - n
			}
			rest := c.b.repeat(max(minI-n, 0), more, oneByte(','), ref(c.j.ws), ref(extraRule))
			c.b.alt(tail, ref(rest), oneByte(']'))
		} else if n >= minI {
			c.b.alt(tail, oneByte(']'))
		} else {
			return 0, unsat(path, "minItems above the items allowed")
		}
	}
	for i := n - 1; i >= 1; i-- {
		r := c.b.newRule("tuple")
		c.b.alt(r, oneByte(','), ref(c.j.ws), ref(items[i]), ref(tail))
		if i >= minI {
			c.b.alt(r, oneByte(']'))
		}
		tail = r
	}
	r := c.b.newRule("tuple")
	if n == 0 {
		c.b.alt(r, oneByte('['), ref(tail))
		return r, nil
	}
	c.b.alt(r, oneByte('['), ref(items[0]), ref(tail))
	if minI == 0 {
		c.b.alt(r, lit("[]")...)
	}
	return r, nil
}

func (c *schemaCompiler) str(s *jv, path string) (int32, error) {
	minL, err := count(s, "minLength", path)
	if err != nil {
		return 0, err
	}
	maxL, err := count(s, "maxLength", path)
	if err != nil {
		return 0, err
	}
	hasLen := minL >= 0 || maxL >= 0
	minL = max(minL, 0)
	if maxL >= 0 && minL > maxL {
		return 0, unsat(path, "minLength above maxLength")
	}
	if pv := s.get("pattern"); pv != nil {
		if pv.kind != 's' {
			return 0, unsupported("pattern", path, "not a string")
		}
		if hasLen {
			return 0, unsupported("pattern", path, "together with minLength/maxLength")
		}
		if s.get("format") != nil && formatRule(c, s.get("format").str) >= 0 {
			return 0, unsupported("pattern", path, "together with a format")
		}
		body, err := compileRegexInto(c.b, pv.str, true, false)
		if err != nil {
			return 0, unsupported("pattern", path, err.Error())
		}
		return c.b.seqRule("pattern", oneByte('"'), ref(body), oneByte('"')), nil
	}
	if fv := s.get("format"); fv != nil && fv.kind == 's' {
		if fr := formatRule(c, fv.str); fr >= 0 {
			if hasLen {
				return 0, unsupported("format", path, fmt.Sprintf("%q together with minLength/maxLength", fv.str))
			}
			return c.b.seqRule("format", oneByte('"'), ref(fr), oneByte('"')), nil
		}
	}
	if !hasLen {
		return c.j.str, nil
	}
	if minL > maxRepeatMax {
		return 0, unsupported("minLength", path, "too large")
	}
	if maxL < 0 || maxL > max(minL, lengthCap) {
		maxL = max(minL, lengthCap)
	}
	return c.b.seqRule("string", oneByte('"'), ref(c.b.repeat(minL, maxL, ref(c.j.char))), oneByte('"')), nil
}

// formatPatterns are regular subsets of the formats OpenAI's strict mode
// lists (and a few more): every match is valid under the format, with
// lengths bounded so a sampled value stays short.
var formatPatterns = map[string]string{
	"date-time": `[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`,
	"date":      `[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])`,
	"time":      `([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`,
	"duration":  `P([1-9][0-9]{0,3}D|T[1-9][0-9]{0,3}[HMS])`,
	"uuid":      `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`,
	"email":     `[a-z0-9]{1,20}(\.[a-z0-9]{1,20}){0,2}@[a-z0-9]{1,20}(\.[a-z0-9]{1,20}){0,2}\.[a-z]{2,6}`,
	"hostname":  `[a-z0-9]{1,20}(\.[a-z0-9]{1,20}){0,3}`,
	"ipv4":      `(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}`,
	"ipv6":      `[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}`,
	"uri":       `https://[a-z0-9]{1,20}(\.[a-z0-9]{1,20}){0,3}(/[a-zA-Z0-9_-]{1,20}){0,4}`,
}

// formatRule is the rule of a known format, or -1 for one treated as an
// annotation.
func formatRule(c *schemaCompiler, f string) int32 {
	if r, ok := c.refs["format:"+f]; ok {
		return r
	}
	pat, ok := formatPatterns[f]
	if !ok {
		return -1
	}
	r, err := compileRegexInto(c.b, pat, true, true)
	if err != nil {
		c.b.fail(err)
		return -1
	}
	c.refs["format:"+f] = r
	return r
}

// intBound is the largest magnitude an integer is generated with.
var intBound = int64(pow10(maxIntDigits) - 1)

func (c *schemaCompiler) number(s *jv, integer bool, path string) (int32, error) {
	lo, hi := new(big.Rat).SetInt64(-intBound), new(big.Rat).SetInt64(intBound)
	loX, hiX := false, false
	rat := func(v *jv, kw string) (*big.Rat, error) {
		r, ok := new(big.Rat).SetString(v.num.String())
		if !ok {
			return nil, unsupported(kw, path, "not a number")
		}
		return r, nil
	}
	bound := func(kw string, isMin, excl bool) error {
		v := s.get(kw)
		if v == nil {
			return nil
		}
		if v.kind == 'b' { // draft 4 exclusive flags
			if !v.b {
				return nil
			}
			if isMin {
				loX = true
			} else {
				hiX = true
			}
			return nil
		}
		if v.kind != 'n' {
			return unsupported(kw, path, "not a number")
		}
		r, err := rat(v, kw)
		if err != nil {
			return err
		}
		if isMin {
			if c := r.Cmp(lo); c > 0 || (c == 0 && excl) {
				lo, loX = r, excl
			}
		} else {
			if c := r.Cmp(hi); c < 0 || (c == 0 && excl) {
				hi, hiX = r, excl
			}
		}
		return nil
	}
	for _, b := range []struct {
		kw         string
		isMin, exc bool
	}{{"minimum", true, false}, {"maximum", false, false}, {"exclusiveMinimum", true, true}, {"exclusiveMaximum", false, true}} {
		if err := bound(b.kw, b.isMin, b.exc); err != nil {
			return 0, err
		}
	}
	// Integer range [ilo, ihi].
	ilo := ceilRat(lo)
	if loX && new(big.Rat).SetInt64(ilo).Cmp(lo) == 0 {
		ilo++
	}
	ihi := floorRat(hi)
	if hiX && new(big.Rat).SetInt64(ihi).Cmp(hi) == 0 {
		ihi--
	}
	fracDigits := maxFracDigits
	if mv := s.get("multipleOf"); mv != nil {
		m, err := rat(mv, "multipleOf")
		if err != nil {
			return 0, err
		}
		if m.Sign() <= 0 {
			return 0, unsupported("multipleOf", path, "not positive")
		}
		// 10^-d (d >= 0): at most d fraction digits; 1: integers.
		d := 0
		p := new(big.Rat).Set(m)
		for p.Cmp(big.NewRat(1, 1)) < 0 && d < 18 {
			p.Mul(p, big.NewRat(10, 1))
			d++
		}
		if p.Cmp(big.NewRat(1, 1)) == 0 {
			fracDigits = d
		} else if m.IsInt() && ilo <= 0 && ihi >= 0 {
			// Another multiple: zero is the one multiple every such
			// schema allows.
			return c.b.seqRule("zero", lit("0")...), nil
		} else {
			return 0, unsupported("multipleOf", path, fmt.Sprintf("%s (only 1 and powers of ten below it, or 0 in range)", mv.num))
		}
	}
	if integer {
		fracDigits = 0
	}
	if ilo > ihi {
		if fracDigits == 0 {
			return 0, unsat(path, "no integer in range")
		}
		return 0, unsupported("minimum", path, "a range holding no integer")
	}
	if ilo == -intBound && ihi == intBound && !integer && fracDigits == maxFracDigits {
		return c.j.number, nil
	}
	if ilo == -intBound && ihi == intBound && fracDigits == 0 {
		return c.j.integer, nil
	}
	r := c.b.newRule("number")
	c.b.alt(r, ref(c.j.intRange(ilo, ihi)))
	if fracDigits > 0 {
		// k.f with f > 0 lies in (k, k+1): allowed for k >= 0 in
		// [max(0, ceil(lo)), floor(hi)-1] whatever the exclusivity.
		flo, fhi := max(0, ceilRat(lo)), floorRat(hi)-1
		if flo <= fhi {
			digit := term(rangeSet('0', '9'))
			frac := c.b.seqRule("frac", oneByte('.'), ref(c.b.repeat(0, fracDigits-1, digit)), term(rangeSet('1', '9')))
			c.b.alt(r, ref(c.j.intRange(flo, fhi)), ref(frac))
		}
	}
	return r, nil
}

func ceilRat(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for positive denominators
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return clampInt(q)
}

func floorRat(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom())
	return clampInt(q)
}

func clampInt(q *big.Int) int64 {
	if q.Cmp(big.NewInt(intBound)) > 0 {
		return intBound
	}
	if q.Cmp(big.NewInt(-intBound)) < 0 {
		return -intBound
	}
	return q.Int64()
}
