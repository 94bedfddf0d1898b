// .npy: round trips, and NumPy reading our files and us reading NumPy's.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <cstring>
#include <fstream>
#include <limits>

#include "fp4moe/error.h"
#include "io/npy.h"
#include "support/oracle.h"

namespace fp4moe {
namespace {

TEST(Npy, RoundTripAndNumpyInterop) {
  const auto dir = test::temp_dir();
  const std::string ours = (dir / "ours.npy").string(), theirs = (dir / "theirs.npy").string();
  std::vector<float> v(6 * 5);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) - 3;
  write_npy(ours, npy_from_float(v, {6, 5}));
  const NpyArray back = read_npy(ours);
  EXPECT_EQ(back.shape, (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(npy_to_float(back, "x"), v);
  // NumPy reads ours and writes a float64 transpose-free copy that we read back.
  const std::string cmd = std::string(FP4MOE_PYTHON) + " -c \"import numpy as np; a=np.load('" +
                          ours + "'); assert a.shape==(6,5) and a.dtype==np.float32; np.save('" +
                          theirs + "', a.astype(np.float64) * 2)\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const NpyArray t = read_npy(theirs);
  EXPECT_EQ(t.descr, "<f8");
  const std::vector<float> tv = npy_to_float(t, "theirs");
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(tv[i], 2 * v[i]);
  std::filesystem::remove(ours);
  std::filesystem::remove(theirs);
}

TEST(Npy, ClearErrorsForBadFiles) {
  const auto dir = test::temp_dir();
  EXPECT_THROW(read_npy((dir / "missing.npy").string()), Error);
  const std::string p = (dir / "bad.npy").string();
  write_npy(p, npy_from_float(std::vector<float>(100, 1.0f), {100}));
  std::filesystem::resize_file(p, 200);  // truncate the data
  try {
    read_npy(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  {
    std::ofstream f(p, std::ios::binary);
    f << "not numpy at all";
  }
  EXPECT_THROW(read_npy(p), Error);
  std::filesystem::remove(p);
}

// Values the conversion to float cannot hold are named with their place (1e300 read as infinity
// and was reported as one); a header over version 1.0's 16 bits is refused, not wrapped.
TEST(Npy, OutOfRangeValuesAndOversizedHeadersAreClearErrors) {
  NpyArray a;
  a.descr = "<f8";
  a.shape = {2, 2};
  const double values[4] = {1.5, -2.0, 1e300, std::numeric_limits<double>::infinity()};
  a.bytes.resize(sizeof(values));
  std::memcpy(a.bytes.data(), values, sizeof(values));
  try {
    npy_to_float(a, "x.npy");
    ADD_FAILURE() << "1e300 read as a float";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.npy: element 2 is 1e+300, beyond float32's range"), std::string::npos)
        << e.what();
  }
  a.shape = {2, 1};  // the finite, representable ones pass
  a.bytes.resize(16);
  EXPECT_EQ(npy_to_float(a, "x.npy"), (std::vector<float>{1.5f, -2.0f}));
  NpyArray wide = npy_from_float(std::vector<float>(1, 1.0f), std::vector<int64_t>(30000, 1));
  const std::string p = (test::temp_dir() / "wide.npy").string();
  try {
    write_npy(p, wide);
    ADD_FAILURE() << "a 30000-dimension header was written";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds version 1.0's 65535"), std::string::npos) << e.what();
  }
}

// A file whose header lies: each is a one-line Error naming the file, before anything the
// header claims is allocated or read.
std::string npy_error(const std::string& path, const std::string& header_dict, size_t data_bytes = 16) {
  std::string h = header_dict;
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  {
    std::ofstream f(path, std::ios::binary);
    f.write("\x93NUMPY\x01\x00", 8);
    const char len[2] = {static_cast<char>(h.size() & 0xFF), static_cast<char>(h.size() >> 8)};
    f.write(len, 2);
    f << h << std::string(data_bytes, '\0');
  }
  try {
    read_npy(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Npy, LyingHeadersAreClearErrors) {
  const std::string p = (test::temp_dir() / "lying.npy").string();
  // elements x item size leaves int64: a wrapped product once passed as 0 bytes (then a crash)
  std::string e = npy_error(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (72057594037927936, 256), }");
  EXPECT_NE(e.find("lying.npy: shape (72057594037927936, 256)"), std::string::npos) << e;
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
  // 1 TB claimed, 16 bytes present: "truncated" before a 1 TB allocation
  e = npy_error(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 256), }");
  EXPECT_NE(e.find("truncated .npy data (its shape (1000000000, 256) needs 1024000000000 bytes, the file holds 16)"),
            std::string::npos) << e;
  e = npy_error(p, "{'descr': '<fx', 'fortran_order': False, 'shape': (2, 2), }");
  EXPECT_NE(e.find("lying.npy: bad .npy dtype '<fx'"), std::string::npos) << e;
  e = npy_error(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (1x, 4), }");
  EXPECT_NE(e.find("malformed .npy shape (1x, 4)"), std::string::npos) << e;
  e = npy_error(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'descr': '<f8'}");
  EXPECT_NE(e.find("malformed .npy header (a key given twice)"), std::string::npos) << e;
  e = npy_error(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2}");
  EXPECT_NE(e.find("malformed .npy header (a value is not closed)"), std::string::npos) << e;
  e = npy_error(p, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)} x");
  EXPECT_NE(e.find("malformed .npy header (text after the '}')"), std::string::npos) << e;
  // What numpy's reader (a Python literal) also takes: double quotes, other spacing, no trailing
  // comma. 2 x 2 float32 of 16 bytes each time.
  for (const char* dict : {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 2)}",
                           "{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , 2 ) }",
                           "{'shape': (2,2), 'fortran_order': False, 'descr': '<f4',}"})
    EXPECT_EQ(npy_error(p, dict), "no error") << dict;
  std::filesystem::remove(p);
  // Not a regular file: an error, never a blocked open.
  const std::string fifo = (test::temp_dir() / "fifo.npy").string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(read_npy(fifo), Error);
  std::filesystem::remove(fifo);
  // A write that fails only when the stream is flushed (a full device) is an error too.
  if (std::filesystem::exists("/dev/full")) {
    try {
      write_npy("/dev/full", npy_from_float(std::vector<float>(4, 1.0f), {4}));
      ADD_FAILURE() << "writing to /dev/full succeeded";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("write failed"), std::string::npos) << err.what();
    }
  }
  // An array whose bytes disagree with its shape never reaches memcpy.
  NpyArray a;
  a.descr = "<f4";
  a.shape = {1024, 1024};
  a.bytes.assign(16, 0);
  EXPECT_THROW(npy_to_float(a, "short"), Error);
  // Nor is written: a header that disagrees with the data would make a file no reader takes.
  const std::string lying = (test::temp_dir() / "lying.npy").string();
  std::filesystem::remove(lying);
  try {
    write_npy(lying, a);
    ADD_FAILURE() << "an array of 16 bytes was written as 1024 x 1024 floats";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("do not hold the shape (1024, 1024)"), std::string::npos) << err.what();
  }
  EXPECT_FALSE(std::filesystem::exists(lying));
  EXPECT_THROW(write_npy(lying, npy_from_bf16(std::vector<uint16_t>(5), {2, 3})), Error);
}

}  // namespace
}  // namespace fp4moe
