package build

// MadeByNeeds names the fingerprint parts that the build's needs make (engine.NeedsMade):
// the source tree and the inputs files read from it. A fresh node's plan, before its
// source and patch steps ran, finds the build's artifact in the fleet cache by the pins of
// those steps instead.
func (s *Step) MadeByNeeds() []string { return []string{"tree", "inputs"} }
