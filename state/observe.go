package state

// MachineCounts counts the Kubernetes Nodes the state holds by how capacity
// sees them: schedulable (Ready and not cordoned, their allocatable counts),
// cordoned (Ready but cordoned), and not ready (NotReady, cordoned or not).
// Every Node counts toward installed capacity and the high-water mark.
// It is O(Nodes); metrics read it at scrape time.
func (s *State) MachineCounts() (schedulable, cordoned, notReady int) {
	for _, m := range s.hosts {
		switch {
		case !m.rec.Ready:
			notReady++
		case m.rec.Unschedulable:
			cordoned++
		default:
			schedulable++
		}
	}
	return schedulable, cordoned, notReady
}

// Float is the amount in units, as a metric's value: 8000 is 8.
func (a Amount) Float() float64 { return float64(a) / 1000 }
