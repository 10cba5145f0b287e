#include "core/decode/relaid_entropy_decoder.h"

#include <algorithm>
#include <array>
#include <cstring>

#include <jconfig.h>
#if !defined(LIBJPEG_TURBO_VERSION_NUMBER) || LIBJPEG_TURBO_VERSION_NUMBER < 2000000
#error "the re-laid JPEG decoder needs libjpeg-turbo 2.0 or later (jpegint.h's module layout)"
#endif

// libjpeg's module interface: the entropy decoder's slot and the crop's
// columns (jpeg_decomp_master), as libjpeg-turbo 2.x lays them out.
#include <jerror.h>
#include <jpegint.h>

namespace conveyor {

namespace {

// Coefficients are placed by libjpeg's own zigzag table (jpeg_natural_order,
// DCTSIZE2 + 16 entries: positions past 63, which only corrupt data
// reaches, land on 63).

// 11 bits. relay_bench (train 224, 300 files) measured 0.735, 0.701 and
// 0.709 CPU-ms/image with lookups of 9, 10 and 11 bits before an entry
// carried the run and end of block, and 0.680 and 0.675 (10 and 11, two
// runs each) after.
constexpr int kLookBits = 11;

inline int Extend(uint32_t v, int s) {
  return v < (1u << (s - 1)) ? static_cast<int>(v) - (1 << s) + 1 : static_cast<int>(v);
}

// One Huffman table. A code of at most kLookBits bits is looked up by the
// next kLookBits bits, in an entry that says all there is to do:
//   bits 0-4   bits to drop (the code, and its value bits when they fit)
//   bits 5-8   run of zeros before the value (AC)
//   bits 9-12  value bits still to read (those that did not fit)
//   bit 13     end of block (AC symbol 0x00)
//   bit 14     (from Bits::Entry only) a longer code, already dropped
//   bits 16-31 the value, when its bits fit (else 0)
// 0: a longer code, found by length (T.81 F.2.2.3).
constexpr int32_t kEndOfBlock = 1 << 13;
constexpr int32_t kLongCode = 1 << 14;

struct Table {
  std::array<int32_t, 1 << kLookBits> fast{};
  std::array<int32_t, 18> max_code{};  // per length; -1: none
  std::array<int32_t, 17> offset{};    // symbols index of a length's codes, minus the first code
  std::array<uint8_t, 256> symbols{};

  bool Build(const JHUFF_TBL* t, bool dc) {
    if (t == nullptr) return false;
    fast.fill(0);
    max_code.fill(-1);
    int32_t code = 0;
    int k = 0;
    for (int len = 1; len <= 16; ++len) {
      const int n = t->bits[len];
      offset[static_cast<size_t>(len)] = k - code;
      for (int i = 0; i < n; ++i, ++k, ++code) {
        if (k >= 256 || code >= (1 << len)) return false;  // not a prefix code
        const uint8_t sym = t->huffval[k];
        if (dc && sym > 15) return false;
        symbols[static_cast<size_t>(k)] = sym;
        if (len > kLookBits) continue;
        const int shift = kLookBits - len;
        const int run = dc ? 0 : sym >> 4, size = dc ? sym : sym & 15;
        int32_t* entries = &fast[static_cast<size_t>(code << shift)];
        if (!dc && sym == 0) {
          std::fill_n(entries, 1 << shift, kEndOfBlock | len);
        } else if (size == 0 || len + size > kLookBits) {
          // ZRL, a DC difference of 0, or value bits still to read.
          std::fill_n(entries, 1 << shift, size << 9 | run << 5 | len);
        } else {
          // The value's bits are the top `size` of the `shift` after the code.
          const int per_value = 1 << (shift - size);
          for (uint32_t v = 0; v < (1u << size); ++v) {
            const int32_t e = static_cast<int32_t>(static_cast<uint32_t>(Extend(v, size)) << 16) |
                              run << 5 | (len + size);
            std::fill_n(entries + v * static_cast<uint32_t>(per_value), per_value, e);
          }
        }
      }
      if (n > 0) max_code[static_cast<size_t>(len)] = code - 1;
      code <<= 1;
    }
    return k > 0;
  }
};

}  // namespace

struct RelaidEntropyDecoder::Impl {
  // libjpeg's module; `self` finds this object from cinfo->entropy.
  struct Module {
    jpeg_entropy_decoder pub;
    Impl* self;
  } module{};
  const uint8_t* jpeg = nullptr;
  McuIntervals intervals;
  uint32_t mcus_per_row = 0, col = 0, row = 0;
  size_t next = 0;  // MCUs libjpeg has asked for
  uint64_t decoded = 0;
  std::array<Table, NUM_HUFF_TBLS> dc_tables, ac_tables;
  std::array<const Table*, D_MAX_BLOCKS_IN_MCU> block_dc{}, block_ac{};
  std::array<int, D_MAX_BLOCKS_IN_MCU> block_component{};
  int blocks = 0;

  // The bits of one MCU, MSB first in `buf` (`count` of them).
  struct Bits {
    const uint8_t* p;
    const uint8_t* end;
    uint64_t buf = 0;
    int count = 0;
    size_t real = 0, fake = 0;  // bytes read from the interval; zeros fed past it
    bool bad = false;

    // Leaves at least 57 bits in buf.
    void Refill() {
      if (end - p >= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        w = __builtin_bswap64(w);
        const uint64_t inv = ~w;  // a 0xFF byte is a zero byte of ~w
        if (((inv - 0x0101010101010101ull) & ~inv & 0x8080808080808080ull) == 0) {
          const int k = (63 - count) >> 3;
          buf |= (w >> (64 - 8 * k)) << (64 - count - 8 * k);
          p += k;
          count += 8 * k;
          real += static_cast<size_t>(k);
          return;
        }
      }
      while (count <= 56) {
        uint64_t b = 0;
        if (p < end) {
          b = *p++;
          ++real;
          if (b == 0xFF) {
            if (p < end && *p == 0x00) {
              ++p;
            } else {
              bad = true;  // a marker inside an interval
              p = end;
            }
          }
        } else {
          ++fake;
        }
        buf |= b << (56 - count);
        count += 8;
      }
    }
    uint32_t Take(int n) {  // 1 ≤ n ≤ 16, count ≥ n
      const uint32_t v = static_cast<uint32_t>(buf >> (64 - n));
      buf <<= n;
      count -= n;
      return v;
    }
    void Drop(int n) {
      buf <<= n;
      count -= n;
    }
    // The entry (as Table::fast) of the next code of `t`, its code consumed
    // when it is longer than kLookBits; 0 for a code not in `t`.
    int32_t Entry(const Table& t, bool dc) {
      const int32_t e = t.fast[buf >> (64 - kLookBits)];
      if (e != 0) return e;
      for (int len = kLookBits + 1; len <= 16; ++len) {
        const int32_t code = static_cast<int32_t>(buf >> (64 - len));
        if (code <= t.max_code[static_cast<size_t>(len)]) {
          Drop(len);
          const int sym = t.symbols[static_cast<size_t>(t.offset[static_cast<size_t>(len)] + code)];
          if (!dc && sym == 0) return kEndOfBlock;
          // Nothing more to drop (the code is gone): bits 0-4 stay 0, and
          // kLongCode keeps the entry from reading as "no code".
          return kLongCode | (dc ? sym << 9 : (sym & 15) << 9 | (sym >> 4) << 5);
        }
      }
      return 0;
    }
  };

  // Decodes MCU `m` into `data`; false for corrupt data.
  bool Decode(size_t m, JBLOCKROW* data) {
    Bits bits{jpeg + intervals.starts[m], jpeg + intervals.ends[m]};
    std::array<int, MAX_COMPS_IN_SCAN> predictor{};  // each MCU restarts them
    for (int b = 0; b < blocks; ++b) {
      JCOEF* block = data[b][0];
      if (bits.count < 32) bits.Refill();
      int32_t e = bits.Entry(*block_dc[static_cast<size_t>(b)], true);
      if (e == 0) return false;
      bits.Drop(e & 31);
      int diff = e >> 16;
      int size = (e >> 9) & 15;
      if (size != 0) diff = Extend(bits.Take(size), size);
      int& pred = predictor[static_cast<size_t>(block_component[static_cast<size_t>(b)])];
      pred += diff;
      block[0] = static_cast<JCOEF>(pred);
      const Table& ac = *block_ac[static_cast<size_t>(b)];
      for (int k = 1; k < 64; ++k) {
        if (bits.count < 32) bits.Refill();
        e = bits.Entry(ac, false);
        if (e == 0) return false;
        bits.Drop(e & 31);
        if (e & kEndOfBlock) break;
        k += (e >> 5) & 15;
        int value = e >> 16;
        size = (e >> 9) & 15;
        if (size != 0) value = Extend(bits.Take(size), size);
        // (A run of 16 zeros stores a zero where the data has one.)
        block[jpeg_natural_order[k]] = static_cast<JCOEF>(value);
      }
    }
    // The MCU ends inside its interval: what follows it is padding.
    const size_t used = (bits.real + bits.fake) * 8 - static_cast<size_t>(bits.count);
    return !bits.bad && used <= bits.real * 8;
  }

  static void Corrupt(j_decompress_ptr cinfo) { WARNMS(cinfo, JWRN_HUFF_BAD_CODE); }

  static boolean DecodeMcu(j_decompress_ptr cinfo, JBLOCKROW* data) {
    Impl* s = reinterpret_cast<Module*>(cinfo->entropy)->self;
    const size_t m = s->next++;
    const uint32_t col = s->col, row = s->row;
    if (++s->col == s->mcus_per_row) {
      s->col = 0;
      ++s->row;
    }
    if (row != cinfo->input_iMCU_row || m >= s->intervals.starts.size()) {
      Corrupt(cinfo);
      return TRUE;
    }
    if (data == nullptr || col < cinfo->master->first_iMCU_col ||
        col > cinfo->master->last_iMCU_col) {
      return TRUE;  // a block libjpeg will not use: not decoded at all
    }
    ++s->decoded;
    if (!s->Decode(m, data)) Corrupt(cinfo);
    return TRUE;
  }

  static void StartPass(j_decompress_ptr) {}
};

RelaidEntropyDecoder::RelaidEntropyDecoder() : impl_(std::make_unique<Impl>()) {}
RelaidEntropyDecoder::~RelaidEntropyDecoder() = default;

uint64_t RelaidEntropyDecoder::mcus_decoded() const { return impl_->decoded; }

bool RelaidEntropyDecoder::Install(j_decompress_ptr cinfo, std::span<const uint8_t> jpeg,
                                   const McuIntervals& intervals) {
  Impl& s = *impl_;
  s.decoded = 0;
  if (cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8 ||
      cinfo->restart_interval != 1 || cinfo->comps_in_scan != cinfo->num_components ||
      cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU || cinfo->input_iMCU_row != 0) {
    return false;
  }
  if (cinfo->comps_in_scan == 1 && (cinfo->cur_comp_info[0]->h_samp_factor != 1 ||
                                    cinfo->cur_comp_info[0]->v_samp_factor != 1)) {
    return false;
  }
  const size_t mcus = static_cast<size_t>(cinfo->MCUs_per_row) * cinfo->total_iMCU_rows;
  if (intervals.starts.size() != mcus || intervals.ends.size() != mcus || mcus == 0 ||
      intervals.ends.back() + 2 > jpeg.size()) {
    return false;
  }
  for (size_t m = 0; m < mcus; ++m) {
    if (intervals.starts[m] > intervals.ends[m] || intervals.ends[m] > jpeg.size()) return false;
  }
  std::array<bool, NUM_HUFF_TBLS> dc_built{}, ac_built{};
  s.blocks = cinfo->blocks_in_MCU;
  for (int b = 0; b < s.blocks; ++b) {
    const int ci = cinfo->MCU_membership[b];
    const jpeg_component_info* comp = cinfo->cur_comp_info[ci];
    const int dc = comp->dc_tbl_no, ac = comp->ac_tbl_no;
    if (dc < 0 || dc >= NUM_HUFF_TBLS || ac < 0 || ac >= NUM_HUFF_TBLS) return false;
    if (!dc_built[static_cast<size_t>(dc)]) {
      if (!s.dc_tables[static_cast<size_t>(dc)].Build(cinfo->dc_huff_tbl_ptrs[dc], true)) {
        return false;
      }
      dc_built[static_cast<size_t>(dc)] = true;
    }
    if (!ac_built[static_cast<size_t>(ac)]) {
      if (!s.ac_tables[static_cast<size_t>(ac)].Build(cinfo->ac_huff_tbl_ptrs[ac], false)) {
        return false;
      }
      ac_built[static_cast<size_t>(ac)] = true;
    }
    s.block_dc[static_cast<size_t>(b)] = &s.dc_tables[static_cast<size_t>(dc)];
    s.block_ac[static_cast<size_t>(b)] = &s.ac_tables[static_cast<size_t>(ac)];
    s.block_component[static_cast<size_t>(b)] = ci;
  }
  s.jpeg = jpeg.data();
  s.intervals = intervals;
  s.mcus_per_row = cinfo->MCUs_per_row;
  s.col = s.row = 0;
  s.next = 0;
  s.module.pub.start_pass = &Impl::StartPass;
  s.module.pub.decode_mcu = &Impl::DecodeMcu;
  s.module.pub.insufficient_data = FALSE;
  s.module.self = &s;
  cinfo->entropy = &s.module.pub;
  // libjpeg reads the markers after the scan once the last row is decoded:
  // its source now starts at the end of image marker.
  cinfo->src->next_input_byte = jpeg.data() + intervals.ends.back();
  cinfo->src->bytes_in_buffer = jpeg.size() - intervals.ends.back();
  return true;
}

}  // namespace conveyor
