#include "core/decode/relaid_entropy_decoder.h"

#include <cstring>

// libjpeg's module interface: the entropy decoder's slot and the crop's
// columns (jpeg_decomp_master), as libjpeg-turbo 2.x lays them out.
#include <jerror.h>
#include <jpegint.h>

namespace conveyor {

namespace {

// Zigzag position → natural (row-major) position; positions past 63, which
// only corrupt data reaches, land on 63 as in libjpeg.
constexpr std::array<uint8_t, 80> kNaturalOrder = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

constexpr int kLookBits = 9;

inline int Extend(uint32_t v, int s) {
  return v < (1u << (s - 1)) ? static_cast<int>(v) - (1 << s) + 1 : static_cast<int>(v);
}

// One Huffman table: codes of at most kLookBits bits by lookup, longer ones
// by length (T.81 F.2.2.3).
struct Table {
  std::array<uint16_t, 1 << kLookBits> fast{};  // (length << 8 | symbol); 0: longer code
  // AC only: (value << 8 | run << 4 | code + value bits) for codes whose
  // value bits fit too; 0: none.
  std::array<int32_t, 1 << kLookBits> fast_ac{};
  std::array<int32_t, 18> max_code{};  // per length; -1: none
  std::array<int32_t, 17> offset{};    // symbols index of a length's codes, minus the first code
  std::array<uint8_t, 256> symbols{};

  bool Build(const JHUFF_TBL* t, bool dc) {
    if (t == nullptr) return false;
    fast.fill(0);
    fast_ac.fill(0);
    max_code.fill(-1);
    int32_t code = 0;
    int k = 0;
    for (int len = 1; len <= 16; ++len) {
      const int n = t->bits[len];
      offset[static_cast<size_t>(len)] = k - code;
      for (int i = 0; i < n; ++i, ++k, ++code) {
        if (k >= 256) return false;
        const uint8_t sym = t->huffval[k];
        if (dc && sym > 15) return false;
        symbols[static_cast<size_t>(k)] = sym;
        if (len <= kLookBits) {
          const int shift = kLookBits - len;
          for (int j = 0; j < (1 << shift); ++j) {
            const int at = (code << shift) | j;
            fast[static_cast<size_t>(at)] = static_cast<uint16_t>(len << 8 | sym);
            const int size = sym & 15;
            if (!dc && size != 0 && len + size <= kLookBits) {
              const uint32_t v = static_cast<uint32_t>(j >> (shift - size)) & ((1u << size) - 1);
              fast_ac[static_cast<size_t>(at)] =
                  Extend(v, size) * 256 + (sym >> 4) * 16 + len + size;
            }
          }
        }
      }
      if (n > 0) max_code[static_cast<size_t>(len)] = code - 1;
      if (code > (1 << len)) return false;  // not a prefix code
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
    // The next symbol of `t`, its code consumed; -1 for a code not in it.
    int Symbol(const Table& t) {
      const uint16_t e = t.fast[buf >> (64 - kLookBits)];
      if (e != 0) {
        Drop(e >> 8);
        return e & 0xFF;
      }
      for (int len = kLookBits + 1; len <= 16; ++len) {
        const int32_t code = static_cast<int32_t>(buf >> (64 - len));
        if (code <= t.max_code[static_cast<size_t>(len)]) {
          Drop(len);
          return t.symbols[static_cast<size_t>(t.offset[static_cast<size_t>(len)] + code)];
        }
      }
      return -1;
    }
  };

  // Decodes MCU `m` into `data`; false for corrupt data.
  bool Decode(size_t m, JBLOCKROW* data) {
    Bits bits{jpeg + intervals.starts[m], jpeg + intervals.ends[m]};
    std::array<int, MAX_COMPS_IN_SCAN> predictor{};  // each MCU restarts them
    for (int b = 0; b < blocks; ++b) {
      JCOEF* block = data[b][0];
      if (bits.count < 32) bits.Refill();
      int s = bits.Symbol(*block_dc[static_cast<size_t>(b)]);
      if (s < 0) return false;
      int& pred = predictor[static_cast<size_t>(block_component[static_cast<size_t>(b)])];
      if (s != 0) pred += Extend(bits.Take(s), s);
      block[0] = static_cast<JCOEF>(pred);
      const Table& ac = *block_ac[static_cast<size_t>(b)];
      for (int k = 1; k < 64;) {
        if (bits.count < 32) bits.Refill();
        const int32_t fa = ac.fast_ac[bits.buf >> (64 - kLookBits)];
        if (fa != 0) {
          k += (fa >> 4) & 15;
          block[kNaturalOrder[static_cast<size_t>(k)]] = static_cast<JCOEF>(fa >> 8);
          bits.Drop(fa & 15);
          ++k;
          continue;
        }
        const int rs = bits.Symbol(ac);
        if (rs < 0) return false;
        const int run = rs >> 4;
        s = rs & 15;
        if (s != 0) {
          k += run;
          block[kNaturalOrder[static_cast<size_t>(k)]] =
              static_cast<JCOEF>(Extend(bits.Take(s), s));
          ++k;
        } else if (run == 15) {
          k += 16;
        } else {
          break;
        }
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
