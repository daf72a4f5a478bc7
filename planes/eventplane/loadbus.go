package eventplane

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/tandemllm/tandem/router"
)

// Load message headers on a load subject (LoadSubject). The routing side
// of load sharing is router.LoadShare; this file is its transport only.
const (
	hdrKind      = "Tandem-Kind"
	hdrRequest   = "Tandem-Request"
	hdrPredicted = "Tandem-Predicted"
	hdrCached    = "Tandem-Cached"
	hdrLen       = "Tandem-Prompt-Len"
	hdrBlockSize = "Tandem-Block-Size"
)

// LoadBus carries router.LoadMessages between router replicas on NATS:
// one subject per model (LoadSubject), the fields in headers and a
// Routed message's block hashes as little-endian uint64s in the body.
type LoadBus struct {
	nc     *nats.Conn
	prefix string
}

var _ router.LoadBus = (*LoadBus)(nil)

// NewLoadBus returns the load bus on nc under subject prefix.
func NewLoadBus(nc *nats.Conn, prefix string) *LoadBus {
	return &LoadBus{nc: nc, prefix: prefix}
}

// Publish implements router.LoadBus.
func (b *LoadBus) Publish(lm *router.LoadMessage) error {
	m := nats.NewMsg(LoadSubject(b.prefix, lm.Model))
	m.Header.Set(hdrRouter, lm.Router)
	m.Header.Set(hdrKind, string(lm.Kind))
	m.Header.Set(hdrRequest, lm.Request)
	m.Header.Set(hdrWorker, lm.Worker)
	m.Header.Set(hdrModel, lm.Model)
	switch lm.Kind {
	case router.LoadRouted:
		m.Header.Set(hdrPredicted, strconv.Itoa(lm.Predicted))
		m.Header.Set(hdrLen, strconv.Itoa(lm.Len))
		m.Header.Set(hdrBlockSize, strconv.Itoa(lm.BlockSize))
		m.Data = make([]byte, 8*len(lm.Hashes))
		for i, v := range lm.Hashes {
			binary.LittleEndian.PutUint64(m.Data[8*i:], v)
		}
	case router.LoadFirst:
		m.Header.Set(hdrCached, strconv.Itoa(lm.Cached))
	}
	return b.nc.PublishMsg(m)
}

// Subscribe implements router.LoadBus. A malformed Routed message (bad
// numbers, a body that is not whole hashes or holds more than
// router.MaxLoadHashes) reaches deliver as a Routed message with Len -1,
// which the share counts as dropped.
func (b *LoadBus) Subscribe(model string, deliver func(*router.LoadMessage)) (func(), error) {
	sub, err := b.nc.Subscribe(LoadSubject(b.prefix, model), func(m *nats.Msg) { deliver(decodeLoad(m)) })
	if err != nil {
		return nil, fmt.Errorf("eventplane: load subject of %s: %w", model, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func decodeLoad(m *nats.Msg) *router.LoadMessage {
	h := m.Header
	lm := &router.LoadMessage{
		Kind: router.LoadKind(h.Get(hdrKind)), Router: h.Get(hdrRouter), Request: h.Get(hdrRequest),
		Model: h.Get(hdrModel), Worker: h.Get(hdrWorker),
	}
	switch lm.Kind {
	case router.LoadRouted:
		n, err := strconv.Atoi(h.Get(hdrLen))
		bs, err2 := strconv.Atoi(h.Get(hdrBlockSize))
		if err != nil || err2 != nil || len(m.Data)%8 != 0 || len(m.Data)/8 > router.MaxLoadHashes {
			lm.Len = -1
			return lm
		}
		lm.Len, lm.BlockSize = n, bs
		lm.Predicted, _ = strconv.Atoi(h.Get(hdrPredicted))
		lm.Hashes = make([]uint64, len(m.Data)/8)
		for i := range lm.Hashes {
			lm.Hashes[i] = binary.LittleEndian.Uint64(m.Data[8*i:])
		}
	case router.LoadFirst:
		lm.Cached, _ = strconv.Atoi(h.Get(hdrCached))
	}
	return lm
}
