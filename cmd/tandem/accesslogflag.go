package main

import "strconv"

// notBool is a boolean flag stored negated, for a Config field whose zero
// value is the default-on behaviour (httpapi.Config.NoAccessLog behind
// --access-log).
type notBool struct{ p *bool }

func (n notBool) String() string {
	if n.p == nil {
		return "true"
	}
	return strconv.FormatBool(!*n.p)
}

func (n notBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*n.p = !v
	return nil
}

func (notBool) Type() string     { return "bool" }
func (notBool) IsBoolFlag() bool { return true }
