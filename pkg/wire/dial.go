package wire

import "google.golang.org/grpc"

// clientWindow is the receive window of an ingest client, per stream and per
// connection: grpc-go's floor. An agent receives only acknowledgements, a few
// bytes each.
const clientWindow = 64 << 10

// clientWriteBuffer bounds what an ingest client hands crypto/tls in one
// write, so every TLS record it sends carries at most this much. The
// aggregator's crypto/tls keeps, per connection and for the connection's
// life, a read buffer as large as the largest record it received (plus
// 512 bytes): with grpc-go's 32 KiB default, a report goes out as one record
// of its size once the connection has sent 128 KiB (crypto/tls sends small
// records only before that), and the aggregator holds ~8 KiB per agent for a
// 6 KiB report, more for a larger one. With 512-byte records the buffer stays
// at the size the ClientHello gave it (~2.6 KiB). A report costs the agent
// one write per 512 bytes and 22 bytes of record overhead per write (4%).
const clientWriteBuffer = 512

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
		grpc.WithWriteBufferSize(clientWriteBuffer),
	}
}
