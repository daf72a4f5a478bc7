// Command tandem is the single binary of Tandem: `tandem serve` runs the
// whole system in one process; `frontend` and `worker` run its parts as
// separate processes; `bench` measures any OpenAI-compatible endpoint; and
// `model gen` writes random-weight models. This package only parses flags
// and wires components: every package registers its own flags (AddFlags on
// its config) and holds its own logic; the commands here call them, print
// banners and run the start-and-drain sequence. TestFlagConsistency keeps
// one type and one default per flag name across the commands.
package main
