package wire

import "google.golang.org/grpc"

// clientWindow is the receive window of an ingest client, per stream and per
// connection: grpc-go's floor. An agent receives only acknowledgements, a few
// bytes each.
const clientWindow = 64 << 10

// DialOptions are the transport options of every IngestService client: the
// agent's uplink and the benches that stand in for agents.
//
// Fixed windows turn grpc-go's BDP estimation off. With it on, every
// acknowledgement arriving on an otherwise idle connection makes the client
// send a WINDOW_UPDATE and a PING, which the aggregator reads and answers and
// the agent reads back: per report, one more TLS record written and one read
// on each side, and at 5,000 agents a thousand more wake-ups a second for the
// aggregator. The aggregator's listener fixes its windows for the same reason.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithStaticStreamWindowSize(clientWindow),
		grpc.WithStaticConnWindowSize(clientWindow),
	}
}
