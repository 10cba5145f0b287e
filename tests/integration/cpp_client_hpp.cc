// A program of the installed C++ header (conveyor_client.hpp, over the C
// ABI), compiled by test_cpp_client.py against the installed package with
// find_package(ConveyorClient): reads one epoch and prints
// "done batches=N samples=M indices=i,j,..." (every sample index, in order),
// or the error on stderr and exit 1. With FIELD (test_cpp_client_fields.py)
// it also prints "values=..." (that sample field's values in the same order:
// hex, "-" for an empty value, "!" prefixed where absent).
//
//   cpp_client_hpp ADDRESS PIPELINE BATCH_SIZE SEED [FIELD]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "conveyor_client.hpp"

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: cpp_client_hpp ADDRESS PIPELINE BATCH_SIZE SEED [FIELD]\n");
    return 2;
  }
  namespace abi = conveyor::abi;
  abi::Client client;
  abi::Status s = abi::Client::Connect(argv[1], &client);
  conveyor_stream_options o = abi::DefaultStreamOptions();
  o.pipeline = argv[2];
  o.batch_size = static_cast<uint32_t>(std::atoi(argv[3]));
  o.seed = std::strtoull(argv[4], nullptr, 10);
  abi::Stream stream;
  if (s.ok()) s = client.OpenStream(o, &stream);
  unsigned long long batches = 0, samples = 0;
  std::string indices, values;
  abi::Batch batch;
  while (s.ok() && (s = stream.Next(&batch)).ok() && batch) {
    ++batches;
    if (argc == 6) {
      abi::FieldView field;
      s = batch.GetField(argv[5], &field);
      if (!s.ok()) break;
      for (uint32_t i = 0; i < field.num_samples; ++i) {
        if (!values.empty()) values += ",";
        if (!field.has(i)) values += "!";
        const std::string_view v = field.value(i);
        if (v.empty()) values += "-";
        for (unsigned char c : v) {
          static const char kHex[] = "0123456789abcdef";
          values += kHex[c >> 4];
          values += kHex[c & 15];
        }
      }
    }
    for (uint32_t i = 0; i < batch.info().num_samples; ++i) {
      if (!indices.empty()) indices += ",";
      indices += std::to_string(batch.info().sample_indices[i]);
    }
    samples += batch.info().num_samples;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "cpp_client_hpp: %s: %s\n", s.name(), s.message.c_str());
    return 1;
  }
  std::printf("done batches=%llu samples=%llu indices=%s", batches, samples, indices.c_str());
  if (argc == 6) std::printf(" values=%s", values.c_str());
  std::printf("\n");
  return 0;
}
