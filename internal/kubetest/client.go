package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/tandemllm/tandem/internal/kubeapi"
)

// Object is a Kubernetes object as JSON: what tests write and read,
// with no typed API group (client-go stays out of the main module).
// Numbers read back are json.Number (Int reads them).
type Object map[string]any

// Get returns the value at a path of map keys, or nil.
func (o Object) Get(path ...string) any {
	var v any = map[string]any(o)
	for _, k := range path {
		m, ok := asMap(v)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// Str returns the string at path ("" when absent or not a string).
func (o Object) Str(path ...string) string {
	s, _ := o.Get(path...).(string)
	return s
}

// Int returns the integer at path; false when absent or not an integer.
func (o Object) Int(path ...string) (int64, bool) { return Int(o.Get(path...)) }

// Map returns the object at path (nil when absent).
func (o Object) Map(path ...string) map[string]any {
	m, _ := asMap(o.Get(path...))
	return m
}

// Slice returns the array at path (nil when absent).
func (o Object) Slice(path ...string) []any {
	s, _ := o.Get(path...).([]any)
	return s
}

// Name, Namespace and Kind are the object's metadata.name,
// metadata.namespace and kind.
func (o Object) Name() string      { return o.Str("metadata", "name") }
func (o Object) Namespace() string { return o.Str("metadata", "namespace") }
func (o Object) Kind() string      { return o.Str("kind") }

// Int reads an integer decoded from JSON (json.Number, float64 without a
// fraction, or a Go integer).
func Int(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		return i, err == nil
	case float64:
		i := int64(n)
		return i, float64(i) == n
	case int:
		return int64(n), true
	case int64:
		return n, true
	case int32:
		return int64(n), true
	}
	return 0, false
}

func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case Object:
		return m, true
	}
	return nil, false
}

// Client is an internal/kubeapi client with the create, get, update,
// patch, delete and list verbs tests need, on absolute API paths
// (/api/v1/namespaces/ns/pods/name, /apis/apps/v1/...).
type Client struct {
	// API is the underlying client (Watch, Do).
	API *kubeapi.Client
}

// Client returns a client for the admin identity.
func (s *Server) Client(t testing.TB) *Client { return s.ClientFor(t, AdminUser) }

// ClientFor returns a client for a user of the token file.
func (s *Server) ClientFor(t testing.TB, user string) *Client {
	t.Helper()
	c, err := kubeapi.NewForConfig(s.APIConfigFor(user))
	must(t, err)
	return &Client{API: c}
}

// IsAlreadyExists reports a create refused because the object exists.
func IsAlreadyExists(err error) bool {
	var se *kubeapi.StatusError
	return errors.As(err, &se) && se.Code == http.StatusConflict && se.Reason == "AlreadyExists"
}

// IsNotFound reports a 404.
func IsNotFound(err error) bool { return kubeapi.IsStatus(err, http.StatusNotFound) }

// IsForbidden reports a 403 (RBAC refused).
func IsForbidden(err error) bool { return kubeapi.IsStatus(err, http.StatusForbidden) }

// IsUnauthorized reports a 401 (authentication failed).
func IsUnauthorized(err error) bool { return kubeapi.IsStatus(err, http.StatusUnauthorized) }

func (c *Client) call(ctx context.Context, method, path, contentType string, in any) (Object, error) {
	return c.callQ(ctx, method, path, nil, contentType, in)
}

func (c *Client) callQ(ctx context.Context, method, path string, q url.Values, contentType string, in any) (Object, error) {
	r := kubeapi.Request{Method: method, Path: path, Query: q, ContentType: contentType}
	if in != nil {
		switch b := in.(type) {
		case []byte:
			r.Body = b
		case string:
			r.Body = []byte(b)
		default:
			var err error
			if r.Body, err = json.Marshal(in); err != nil {
				return nil, fmt.Errorf("kubetest: %s %s: %w", method, path, err)
			}
		}
	}
	var raw json.RawMessage
	if err := c.API.Do(ctx, r, &raw); err != nil {
		return nil, err
	}
	return decode(raw)
}

func decode(raw []byte) (Object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var o Object
	if err := dec.Decode(&o); err != nil {
		return nil, fmt.Errorf("kubetest: decode: %w", err)
	}
	return o, nil
}

// Create POSTs obj (a struct, a map, or JSON as []byte or string) to a
// collection and returns the stored object.
func (c *Client) Create(ctx context.Context, collection string, obj any) (Object, error) {
	return c.call(ctx, http.MethodPost, collection, "", obj)
}

// Get reads one object.
func (c *Client) Get(ctx context.Context, path string) (Object, error) {
	return c.call(ctx, http.MethodGet, path, "", nil)
}

// Update PUTs obj (its metadata.resourceVersion, if set, guards the write).
func (c *Client) Update(ctx context.Context, path string, obj any) (Object, error) {
	return c.call(ctx, http.MethodPut, path, "", obj)
}

// Patch sends a patch of contentType (kubeapi.MergePatch,
// kubeapi.JSONPatch).
func (c *Client) Patch(ctx context.Context, path, contentType string, patch any) (Object, error) {
	return c.call(ctx, http.MethodPatch, path, contentType, patch)
}

// Delete deletes one object.
func (c *Client) Delete(ctx context.Context, path string) error {
	return c.API.Do(ctx, kubeapi.Request{Method: http.MethodDelete, Path: path}, nil)
}

// List reads every item of a collection matching the label selector ("":
// all).
func (c *Client) List(ctx context.Context, collection, labelSelector string) ([]Object, error) {
	var out []Object
	_, err := c.API.List(ctx, collection, labelSelector, func(raw json.RawMessage) error {
		o, err := decode(raw)
		if err != nil {
			return err
		}
		out = append(out, o)
		return nil
	})
	return out, err
}
