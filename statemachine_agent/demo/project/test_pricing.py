"""Tests of pricing.py: run them with ``python3 -m unittest -v``."""

from __future__ import annotations

import unittest

from pricing import apply_discount, subtotal, total


class PricingTest(unittest.TestCase):
    def test_subtotal(self) -> None:
        self.assertEqual(subtotal([2.5, 4.0], [2, 3]), 17.0)

    def test_no_discount(self) -> None:
        self.assertEqual(total([10.0], [3]), 30.0)

    def test_ten_percent_discount(self) -> None:
        self.assertEqual(apply_discount(80.0, 10), 72.0)

    def test_total_with_discount(self) -> None:
        self.assertEqual(total([20.0, 5.0], [1, 4], discount_percent=25), 30.0)

    def test_discount_out_of_range(self) -> None:
        with self.assertRaises(ValueError):
            apply_discount(10.0, 120)


if __name__ == "__main__":
    unittest.main()
