package main

import "github.com/tandemllm/tandem/router"

// routerDescription is a banner's router line.
var routerDescription = router.Describe
