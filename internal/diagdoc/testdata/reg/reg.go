package reg

import "example.com/health"

const (
	DiagA = "code_a"
	DiagB = "code_b"
)

var _ = health.Register(DiagB, DiagA, DiagB)
