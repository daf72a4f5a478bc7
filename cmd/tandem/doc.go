// Command tandem is the single binary of Tandem: `tandem serve` runs the
// whole system in one process; `frontend` and `worker` run its parts as
// separate processes; `bench` measures any OpenAI-compatible endpoint; and
// `model gen` writes random-weight models. This package only parses flags
// and wires components; logic lives in the packages it calls.
package main
