package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of a Client.
const (
	// DefaultTimeout bounds a request that is not a watch.
	DefaultTimeout = 30 * time.Second
	// MaxResponse bounds a response body that is not a watch stream.
	MaxResponse = 64 << 20
	// MaxEvent bounds one watch event.
	MaxEvent = 16 << 20
	// ListPage is the page size of List (the API server's continue
	// tokens carry on from there).
	ListPage = 500
	// minWatch is the shortest server-side watch timeout asked for; each
	// watch asks for between it and twice it, so that many clients'
	// watches do not end together (client-go's reflector does the same).
	minWatch = 5 * time.Minute
)

// Patch content types.
const (
	MergePatch = "application/merge-patch+json"
	JSONPatch  = "application/json-patch+json"
)

// Client sends requests to one API server as one identity.
type Client struct {
	cfg     Config
	base    *url.URL
	http    *http.Client
	creds   *credentials
	timeout time.Duration
}

// NewForConfig builds a Client.
func NewForConfig(cfg *Config) (*Client, error) {
	if cfg == nil {
		return nil, errors.New("kubeapi: no config")
	}
	base, err := cfg.hostURL()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: *cfg, base: base, timeout: cfg.Timeout}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	c.creds = &credentials{cfg: &c.cfg}
	tc, err := c.cfg.tlsConfig(c.creds)
	if err != nil {
		return nil, err
	}
	proxy := http.ProxyFromEnvironment
	if cfg.ProxyURL != "" {
		pu, err := url.Parse(cfg.ProxyURL)
		if err != nil {
			return nil, fmt.Errorf("kubeapi: proxy-url %q: %w", cfg.ProxyURL, err)
		}
		proxy = http.ProxyURL(pu)
	}
	tr := &http.Transport{
		Proxy:                 proxy,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: c.timeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   25,
		ForceAttemptHTTP2:     true,
		// A watch on a connection that died without a FIN would wait
		// forever; HTTP/2 pings find it (client-go's 30 s read-idle check).
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
	c.http = &http.Client{Transport: tr}
	return c, nil
}

// Namespace is the config's namespace (kubeconfig context or pod), if any.
func (c *Client) Namespace() string { return c.cfg.Namespace }

// StatusError is a response other than 2xx, with the API's Status reason
// and message when it sent one.
type StatusError struct {
	Code    int
	Reason  string
	Message string
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	if e.Reason != "" {
		return fmt.Sprintf("%s (%d %s)", msg, e.Code, e.Reason)
	}
	return fmt.Sprintf("%s (%d)", msg, e.Code)
}

// IsStatus reports whether err is (or wraps) a StatusError with that code.
func IsStatus(err error, code int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == code
}

// Request describes one call: the method, an absolute API path
// (/api/v1/namespaces/ns/pods), query values and, for writes, a body and
// its content type.
type Request struct {
	Method      string
	Path        string
	Query       url.Values
	Body        []byte
	ContentType string
}

func (c *Client) newRequest(ctx context.Context, r Request) (*http.Request, error) {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + r.Path
	u.RawQuery = r.Query.Encode()
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "tandem")
	if r.Body != nil {
		ct := r.ContentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	cr, err := c.creds.get(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case cr.token != "":
		req.Header.Set("Authorization", "Bearer "+cr.token)
	case c.cfg.Username != "" || c.cfg.Password != "":
		req.SetBasicAuth(c.cfg.Username, c.cfg.Password)
	}
	return req, nil
}

// send runs a request and returns the response when 2xx; otherwise the
// body is read (bounded) into a StatusError.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: %s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		c.creds.invalidate()
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	se := &StatusError{Code: resp.StatusCode}
	var st struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &st) == nil {
		se.Reason, se.Message = st.Reason, st.Message
	} else if s := strings.TrimSpace(string(b)); s != "" && len(s) < 512 {
		se.Message = s
	}
	return nil, fmt.Errorf("kubeapi: %s %s: %w", req.Method, req.URL.Path, se)
}

// Do runs one request (bounded by the client's timeout) and decodes a 2xx
// JSON response into out (nil: discarded).
func (c *Client) Do(ctx context.Context, r Request, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponse+1))
	if err != nil {
		return fmt.Errorf("kubeapi: %s %s: %w", r.Method, r.Path, err)
	}
	if len(b) > MaxResponse {
		return fmt.Errorf("kubeapi: %s %s: response larger than %d bytes", r.Method, r.Path, MaxResponse)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("kubeapi: %s %s: decode: %w", r.Method, r.Path, err)
	}
	return nil
}

// ListMeta is a list's metadata.
type ListMeta struct {
	ResourceVersion string `json:"resourceVersion"`
	Continue        string `json:"continue"`
}

// List reads every page of a collection (path such as
// /api/v1/namespaces/ns/pods) matching the label selector, decoding each
// item with decode, and returns the list's resourceVersion to watch from.
func (c *Client) List(ctx context.Context, path, labelSelector string, decode func(json.RawMessage) error) (string, error) {
	cont := ""
	for {
		q := url.Values{"limit": {strconv.Itoa(ListPage)}}
		if labelSelector != "" {
			q.Set("labelSelector", labelSelector)
		}
		if cont != "" {
			q.Set("continue", cont)
		}
		var page struct {
			Metadata ListMeta          `json:"metadata"`
			Items    []json.RawMessage `json:"items"`
		}
		if err := c.Do(ctx, Request{Method: http.MethodGet, Path: path, Query: q}, &page); err != nil {
			return "", err
		}
		for _, it := range page.Items {
			if err := decode(it); err != nil {
				return "", fmt.Errorf("kubeapi: list %s: %w", path, err)
			}
		}
		if page.Metadata.Continue == "" {
			return page.Metadata.ResourceVersion, nil
		}
		cont = page.Metadata.Continue
	}
}

// Event types of a watch.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	Bookmark = "BOOKMARK"
	Error    = "ERROR"
)

// Event is one watch event; Object is the object (for ERROR, a Status).
type Event struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// Watcher reads one watch stream.
type Watcher struct {
	body   io.ReadCloser
	lim    *eventLimit
	dec    *json.Decoder
	cancel context.CancelFunc
}

// Watch opens a watch of a collection from resourceVersion, with
// bookmarks. The server ends it after a few minutes (the caller watches
// again from the last version seen); a 410 Gone, as a response or as an
// ERROR event, means the version is too old: list again.
func (c *Client) Watch(ctx context.Context, path, labelSelector, resourceVersion string) (*Watcher, error) {
	timeout := minWatch + time.Duration(rand.Int64N(int64(minWatch)))
	q := url.Values{
		"watch":               {"1"},
		"allowWatchBookmarks": {"true"},
		"timeoutSeconds":      {strconv.Itoa(int(timeout / time.Second))},
	}
	if labelSelector != "" {
		q.Set("labelSelector", labelSelector)
	}
	if resourceVersion != "" {
		q.Set("resourceVersion", resourceVersion)
	}
	// The stream ends by the server's timeout; the context's deadline a
	// minute later ends one whose server went quiet.
	wctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	req, err := c.newRequest(wctx, Request{Method: http.MethodGet, Path: path, Query: q})
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := c.send(req)
	if err != nil {
		cancel()
		return nil, err
	}
	lim := &eventLimit{r: resp.Body, left: MaxEvent}
	return &Watcher{body: resp.Body, lim: lim, dec: json.NewDecoder(lim), cancel: cancel}, nil
}

// Next returns the next event; io.EOF when the server ended the stream.
func (w *Watcher) Next() (Event, error) {
	w.lim.left = MaxEvent
	var e Event
	if err := w.dec.Decode(&e); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) && w.lim.eof {
			return Event{}, io.EOF
		}
		return Event{}, fmt.Errorf("kubeapi: watch: %w", err)
	}
	if e.Type == Error {
		var st struct {
			Code    int    `json:"code"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(e.Object, &st)
		return e, fmt.Errorf("kubeapi: watch: %w", &StatusError{Code: st.Code, Reason: st.Reason, Message: st.Message})
	}
	return e, nil
}

// Close ends the stream.
func (w *Watcher) Close() error {
	w.cancel()
	return w.body.Close()
}

// eventLimit bounds the bytes read for one event.
type eventLimit struct {
	r    io.Reader
	left int64
	eof  bool
}

func (l *eventLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, fmt.Errorf("watch event larger than %d bytes", MaxEvent)
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if errors.Is(err, io.EOF) {
		l.eof = true
	}
	return n, err
}
