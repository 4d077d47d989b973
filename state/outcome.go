package state

import "ome.io/quota-manager/events"

// The leader's applier reports, through Outcome events, how it left each
// node's Kueue objects; the state keeps the last report per node, which the
// node's Materialized condition reads. Only the leader writes, so only the
// leader's stream carries outcomes: the state also records who leads, as
// this replica's Leadership events tell it.
//
// What a non-leader's state means for statuses: nothing is written from
// it. A replica that does not lead (a follower, the recorder, a replica
// before its Leadership event or after it lost the lead) holds no outcome,
// so the statuses projected from its state report every Ready node as not
// Materialized yet (Pending): what this replica would write on taking the
// lead, before its first pass. The statuses in the cluster are the leader's
// and are reproduced by a replay of the leader's log.

// setOutcome keeps the applier's report on a node. A report on a node the
// state does not hold (deleted since the pass that made it) is dropped:
// a node deleted takes its outcome with it, and one created again under
// the same name starts without.
//
// It changes nothing the shell must compare again: the pass that sent
// the report writes the status that follows from it. A new outcome still
// moves the node's Revision, which counts every input of its status.
func (s *State) setOutcome(node string, o events.Outcome) {
	m := s.members[node]
	if m == nil {
		return
	}
	if m.outcome != o {
		m.rev = s.seq
	}
	materialized := m.materialized()
	m.outcome = o
	s.restamp(m, m.ready(), materialized)
}

// setLeadership records a replica taking or losing the lead. Either way
// the outcomes go: they were the last leader's applier's, and a new
// leader's first pass reports every node afresh.
func (s *State) setLeadership(l events.Leadership) {
	switch l.Change {
	case events.LeadershipAcquired:
		s.leader = l.Identity
		s.mark, s.markTerm = l.Mark(), l.Term
	case events.LeadershipLost:
		if s.leader == l.Identity {
			s.leader, s.mark, s.markTerm = "", "", 0
		}
	}
	s.forgetOutcomes()
	s.holdsEverywhere()
}

// started is a Start marker: a new process, which leads nothing yet and
// whose applier has reported nothing.
func (s *State) started() {
	s.leader, s.mark, s.markTerm = "", "", 0
	s.forgetOutcomes()
	s.holdsEverywhere()
	if s.fleet != nil {
		// A new process knows nothing of the fleet but what it reads
		// again: its members come back as Membership events, their copies
		// as Member events, and what the last process let its copiers
		// write is bounded by the teams' hold records, not by its peaks.
		s.fleet = newFleet()
		s.changedEverything()
	}
}

func (s *State) forgetOutcomes() {
	s.revAll = s.seq
	for _, m := range s.members {
		materialized := m.materialized()
		m.outcome = events.Outcome{}
		s.restamp(m, m.ready(), materialized)
	}
}

// Outcome is the applier's last report on a node; the zero Outcome when
// there is none (OutcomeNone).
func (s *State) Outcome(node string) events.Outcome {
	if m := s.members[node]; m != nil {
		return m.outcome
	}
	return events.Outcome{}
}

// Leader is the identity of the replica that leads, as this replica's
// events tell it: its own identity from its Leadership event on, "" before
// and after.
func (s *State) Leader() string { return s.leader }
