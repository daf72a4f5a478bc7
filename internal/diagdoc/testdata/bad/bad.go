package bad

import "example.com/health"

var _ = health.Register("literal_code")
