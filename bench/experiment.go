package bench

// ExperimentResult placeholder
type ExperimentResult struct{}
