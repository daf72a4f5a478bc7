package structured

import (
	"errors"
	"testing"
)

func TestMatchString(t *testing.T) {
	cases := []struct {
		name, schema string
		ok, bad      []string
	}{
		{"object", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}`,
			[]string{`{"a":1}`, `{"a": -12,"b":"x"}`, `{"a":0, "b":"h\"i"}`},
			[]string{`{}`, `{"b":"x"}`, `{"a":01}`, `{"b":"x","a":1}`, `{"a":1,}`, `{"a":1}x`}},
		{"enum", `{"enum":["red","green",3,null]}`, []string{`"red"`, `3`, `null`}, []string{`"blue"`, `4`}},
		{"array", `{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2}`,
			[]string{`[true]`, `[true, false]`}, []string{`[]`, `[true,true,true]`}},
		{"range", `{"type":"integer","minimum":-5,"exclusiveMaximum":120}`,
			[]string{`-5`, `0`, `119`, `42`}, []string{`-6`, `120`, `1000`, `-0`}},
		{"number", `{"type":"number","minimum":0.5,"maximum":2}`,
			[]string{`1`, `2`, `1.25`}, []string{`0`, `2.5`, `3`}},
		{"strlen", `{"type":"string","minLength":2,"maxLength":3}`,
			[]string{`"ab"`, `"abc"`, `"é\n"`}, []string{`"a"`, `"abcd"`}},
		{"pattern", `{"type":"string","pattern":"^[a-c]+\\d$"}`, []string{`"ab1"`}, []string{`"ab"`, `"d1"`}},
		{"format uuid", `{"type":"string","format":"uuid"}`, []string{`"123e4567-e89b-12d3-a456-426614174000"`}, []string{`"x"`}},
		{"ref", `{"$defs":{"n":{"type":"object","properties":{"c":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["c"],"additionalProperties":false}},"$ref":"#/$defs/n"}`,
			[]string{`{"c":[]}`, `{"c":[{"c":[]},{"c":[{"c":[]}]}]}`}, []string{`{"c":[{}]}`}},
		{"anyOf", `{"anyOf":[{"type":"string"},{"type":"null"}]}`, []string{`"x"`, `null`}, []string{`1`}},
		{"optional order", `{"type":"object","properties":{"a":{"type":"null"},"b":{"type":"null"},"c":{"type":"null"}},"additionalProperties":false}`,
			[]string{`{}`, `{"b":null}`, `{"a":null,"c":null}`, `{"a":null, "b":null, "c":null}`}, []string{`{,"b":null}`, `{"c":null,"a":null}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := CompileJSONSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.ok {
				if !g.MatchString(s) {
					t.Errorf("%s not accepted", s)
				}
			}
			for _, s := range tc.bad {
				if g.MatchString(s) {
					t.Errorf("%s accepted", s)
				}
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	cases := []struct {
		schema, keyword string
		unsat           bool
	}{
		{`{"type":"object","propertyNames":{"maxLength":3}}`, "propertyNames", false},
		{`{"not":{"type":"string"}}`, "not", false},
		{`{"type":"string","minLength":5,"maxLength":2}`, "", true},
		{`{"type":"integer","minimum":3,"maximum":2}`, "", true},
		{`false`, "", true},
		{`{"type":"object","properties":{"a":false},"required":["a"]}`, "", true},
		{`{"$ref":"https://example.com/s.json"}`, "$ref", false},
	}
	for _, tc := range cases {
		_, err := CompileJSONSchema([]byte(tc.schema))
		var ue *UnsupportedError
		switch {
		case tc.unsat && !errors.Is(err, ErrUnsatisfiable):
			t.Errorf("%s: %v, want unsatisfiable", tc.schema, err)
		case !tc.unsat && (!errors.As(err, &ue) || ue.Keyword != tc.keyword):
			t.Errorf("%s: %v, want unsupported %q", tc.schema, err, tc.keyword)
		}
	}
}

func TestGBNFAndRegex(t *testing.T) {
	g, err := CompileGBNF(`root ::= "(" expr ")" | num
expr ::= num (("+" | "-") num)*  # sums
num ::= [1-9] [0-9]{0,2}
`)
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"(1+22-333)": true, "7": true, "(0)": false, "1+2": false, "(1234)": false} {
		if g.MatchString(s) != want {
			t.Errorf("gbnf %q: %v", s, !want)
		}
	}
	if _, err := CompileGBNF("root ::= root \"a\" | \"b\""); err == nil {
		t.Error("left recursion accepted")
	}
	if _, err := CompileGBNF("root ::= x"); err == nil {
		t.Error("undefined rule accepted")
	}
	re, err := CompileRegex(`(ab|cd)+[é-ë]?`)
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"ab": true, "abcdê": true, "a": false, "abé!": false} {
		if re.MatchString(s) != want {
			t.Errorf("regex %q: %v", s, !want)
		}
	}
	ch, _ := CompileChoice([]string{"yes", "no"})
	if !ch.MatchString("no") || ch.MatchString("n") {
		t.Error("choice")
	}
}
