package vllmpd

import (
	"encoding/json"
	"fmt"
)

// Params is kv_transfer_params as vLLM's NixlConnector reads and writes it
// (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py). Pointers are fields vLLM sends as null.
type Params struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	// RemoteBlockIDs stays raw: old vLLM sends a flat list, new (HMA)
	// builds one list per KV-cache group. BlockIDs reads both.
	RemoteBlockIDs  json.RawMessage `json:"remote_block_ids"`
	RemoteHost      *string         `json:"remote_host"`
	RemotePort      *int            `json:"remote_port"`
	RemoteRequestID string          `json:"remote_request_id,omitempty"`
	TPSize          int             `json:"tp_size,omitempty"`
	RemoteNumTokens int             `json:"remote_num_tokens,omitempty"`
	// RemoteBlocksExpiryTime is the lease end in Unix seconds (newer
	// builds); null when the prefill side holds blocks without a lease.
	RemoteBlocksExpiryTime *float64 `json:"remote_blocks_expiry_time,omitempty"`
}

// prefillLegParams is exactly what vLLM's proxy sends on the prefill leg.
var prefillLegParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// ParseParams decodes a kv_transfer_params object (nil, empty or null:
// the zero Params).
func ParseParams(raw []byte) (Params, error) {
	var p Params
	if len(raw) == 0 || string(raw) == "null" {
		return p, nil
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, fmt.Errorf("vllmpd: kv_transfer_params: %w", err)
	}
	return p, nil
}

// BlockIDs flattens remote_block_ids, flat or per group.
func (p Params) BlockIDs() ([]int, error) {
	if len(p.RemoteBlockIDs) == 0 || string(p.RemoteBlockIDs) == "null" {
		return nil, nil
	}
	var flat []int
	if err := json.Unmarshal(p.RemoteBlockIDs, &flat); err == nil {
		return flat, nil
	}
	flat = nil // a failed Unmarshal may leave a partial list
	var groups [][]int
	if err := json.Unmarshal(p.RemoteBlockIDs, &groups); err != nil {
		return nil, fmt.Errorf("vllmpd: remote_block_ids: %w", err)
	}
	for _, g := range groups {
		flat = append(flat, g...)
	}
	return flat, nil
}
