package ingest

import (
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// vtMessage is a message with generated (vtprotobuf) marshal code.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
	UnmarshalVT(dAtA []byte) error
}

// codec is grpc-go's protobuf codec with the generated, reflection-free
// code of the ingest messages (vtprotobuf): cheaper per report, and
// shallow, so a stream goroutine's stack stays small. Other messages (the
// health and drain services on the same server) go to grpc's own codec.
// UnmarshalVT does not check that strings are UTF-8; the hello's are
// checked in authenticate and the report's in wire.ReportFromProto.
type codec struct{ fallback encoding.CodecV2 }

func newCodec() codec { return codec{fallback: encoding.GetCodecV2(grpcproto.Name)} }

func (c codec) Name() string { return grpcproto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT(*buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtMessage)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	// UnmarshalVT copies bytes and strings out of buf.
	return m.UnmarshalVT(buf.ReadOnlyData())
}
